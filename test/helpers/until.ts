/**
 * The one polling helper of the test suite: waits until `check` (sync or
 * async) returns true, or throws after `timeoutMs`. Tests wait on conditions
 * this way instead of sleeping a fixed time.
 */
export async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
