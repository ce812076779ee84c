import { randomBytes } from 'node:crypto';

/** Bytes of CSPRNG output in a taskId: 192 bits, well above the 128 the design asks for. */
export const TASK_ID_BYTES = 24;

/** An unguessable, url-safe task id (spec, Security: "sufficient entropy that a third party cannot guess them"). */
export function newTaskId(): string {
  return randomBytes(TASK_ID_BYTES).toString('base64url');
}
