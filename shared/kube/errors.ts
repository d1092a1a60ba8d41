/** Errors of the Kubernetes adapter. Each says which call failed and whether a retry can help. */

export class KubeApiError extends Error {
  override name = 'KubeApiError';
  readonly status: number;
  readonly reason: string;
  readonly call: string;
  readonly retryable: boolean;
  /** A 404 whose body is the server's Status of reason NotFound: the only answer that proves absence. */
  notFound = false;
  constructor(call: string, status: number, reason: string, message: string, options?: ErrorOptions) {
    super(`${call}: ${status} ${reason}: ${message}`, options);
    this.call = call;
    this.status = status;
    this.reason = reason;
    this.retryable = status === 429 || status >= 500 || status === 0;
  }
}

/** A list that could not be proven complete (law 1). */
export class ListIncompleteError extends Error {
  override name = 'ListIncompleteError';
  readonly call: string;
  constructor(call: string, message: string, options?: ErrorOptions) {
    super(`${call}: list incomplete: ${message}`, options);
    this.call = call;
  }
}

export class ConflictError extends KubeApiError {
  override name = 'ConflictError';
}
