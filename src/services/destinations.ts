import { ValidationError } from "../domain/errors.js";
import { privateDestinationProblem, validateWebhookUrl } from "../domain/url-rules.js";
import { isPrivateAddress } from "../net/private-address.js";

/** Checks a destination URL given as `name` (a webhook's url, a workflow's trigger_url); returns it as stored. */
export type DestinationCheck = (input: unknown, name?: string) => string;

/**
 * The check of a destination when it is stored: a valid http(s) URL and, unless private
 * destinations are allowed (ALLOW_PRIVATE_DESTINATIONS), not one that names a private address
 * itself, so the user hears of it at once rather than from a first attempt that can never
 * succeed. The connect-time guard (net/guarded-agent.ts) still judges every name when it resolves.
 */
export function destinationCheck(allowPrivate: boolean): DestinationCheck {
  if (allowPrivate) return validateWebhookUrl;
  return (input, name = "url") => {
    const url = validateWebhookUrl(input, name);
    const problem = privateDestinationProblem(url, isPrivateAddress);
    if (problem) throw new ValidationError(`${name} ${problem}`);
    return url;
  };
}
