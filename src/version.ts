import { readFileSync } from 'node:fs';

/**
 * The package's version, read from its package.json (dist/version.js →
 * ../package.json), so `--version`, `status` and npm always agree.
 */
export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
