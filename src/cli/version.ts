import { kvgateVersion } from '../version.js';

export { kvgateVersion };

export async function versionCommand(_argv: string[]): Promise<number> {
  process.stdout.write(`kvgate ${kvgateVersion()}\n`);
  return 0;
}
