/** Errors of the Kubernetes adapter. Each says which call failed and whether a retry can help. */
import { TwopassError } from '../errors.ts';

export class KubeApiError extends TwopassError {
  override name = 'KubeApiError';
  readonly status: number;
  readonly reason: string;
  readonly retryable: boolean;
  /** A 404 whose body is the server's Status of reason NotFound: the only answer that proves absence. */
  notFound = false;
  constructor(call: string, status: number, reason: string, message: string, options?: ErrorOptions) {
    // status 0: no HTTP answer to speak of (no connection, or a body that is not one)
    super(`${call}: ${status === 0 ? '' : `${status} `}${reason}: ${message}`, {
      call,
      cause: options?.cause,
      context: { status, reason },
    });
    this.status = status;
    this.reason = reason;
    this.retryable = status === 429 || status >= 500 || status === 0;
  }
}

/** 409: the object changed (a precondition or resourceVersion did not hold). */
export class ConflictError extends KubeApiError {
  override name = 'ConflictError';
}
