/**
 * Credentials a URL may carry, kept out of what kvgate shows. NATS URLs take them by design
 * (`nats://user:pass@host`, `nats://token@host`) and an OTLP endpoint may, so anything that prints
 * the config (`/admin/config`, a reload's problems and log lines) shows these URLs through here.
 */

/** `url` with its user and password replaced by `***` (unchanged when it has none or does not parse). */
export function withoutCredentials(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  if (u.username === '' && u.password === '') return url;
  u.username = '***';
  u.password = '';
  return u.href;
}
