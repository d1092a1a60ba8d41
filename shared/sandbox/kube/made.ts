/** What the fake API server makes up for an object, as the apiserver makes it: generated names, managedFields. */
import { randomInt } from 'node:crypto';

/** The five random characters the apiserver appends to a generateName (its alphabet has no vowels). */
function generatedSuffix(): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  let out = '';
  for (let i = 0; i < 5; i++) out += alphabet[randomInt(alphabet.length)];
  return out;
}

/**
 * A name for `prefix` (an object's generateName) that `taken` does not hold: as the
 * apiserver does (RetryGenerateName, GA in 1.32), a generated name already taken is generated
 * again, up to 8 tries; the last is returned taken or not (the create then answers 409).
 */
export function generateName(prefix: string, taken: (name: string) => boolean): string {
  let name = `${prefix}${generatedSuffix()}`;
  for (let i = 1; i < 8 && taken(name); i++) name = `${prefix}${generatedSuffix()}`;
  return name;
}

/**
 * The managedFields the real server keeps, reduced to what is read of them: the time of the
 * last write that changed the object (RFC 3339, whole seconds), under one manager.
 */
export function written(now: Date): unknown[] {
  return [{ manager: 'fake', operation: 'Update', time: now.toISOString().replace(/\.\d{3}Z$/, 'Z') }];
}
