/** Errors of the OpenStack adapter. Messages never carry tokens, passwords or secrets. */

import { ConfigError, TwopassError } from '../errors.ts';

/** The cloud's configuration is wrong (clouds.yaml, credentials, region, auth URL, project): exit 2, a retry cannot help. */
export class OpenStackConfigError extends ConfigError {
  override name = 'OpenStackConfigError';
}

export class OpenStackApiError extends TwopassError {
  override name = 'OpenStackApiError';
  readonly status: number;
  readonly retryable: boolean;
  constructor(call: string, status: number, message: string, options?: ErrorOptions) {
    super(`${call}: ${status === 0 ? '' : `${status} `}${message}`, {
      call,
      cause: options?.cause,
      context: { status },
    });
    this.status = status;
    this.retryable = status === 0 || status === 429 || status >= 500;
  }
}
