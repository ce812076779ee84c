/**
 * How `closeout doctor` marks the requests it sends wrong on purpose, so that a server's log can say what they were
 * instead of reporting them as suspicious traffic (docs/cli.md).
 */

/** The Mcp-Name that doctor's mismatch probe sends: never a taskId (those are base64url of 192 random bits). */
export const DOCTOR_PROBE_MCP_NAME = 'closeout-doctor-probe';

/** A server log line, with what it was when it was doctor's deliberate probe. */
export function describeServerError(message: string): string {
  return message.includes(`"${DOCTOR_PROBE_MCP_NAME}"`)
    ? `${message} (a deliberate probe by \`closeout doctor\`: a mismatched Mcp-Name must be refused, and was)`
    : message;
}
