/**
 * Headless Chromium for the dashboard tests: Debian's `chromium` (installed by scripts/test.sh) driven by
 * playwright-core — never a downloaded browser. Every console error, uncaught page error and failed request
 * is recorded, so a test can fail on any of them; screenshots go to screenshots/ (ignored by git).
 */
import fs from 'node:fs';
import path from 'node:path';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { repoRoot } from '../../src/config.ts';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const SCREENSHOT_DIR = path.join(repoRoot, 'screenshots');

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface BrowserSession {
  browser: Browser;
  context: BrowserContext;
  page: Page;
  /** Console errors, page errors and failed requests seen so far, as readable lines. */
  problems: string[];
  /** The whole page by default; `fullPage: false` for what is on screen (dialogs, fixed overlays). */
  screenshot(name: string, options?: { fullPage?: boolean }): Promise<string>;
  close(): Promise<void>;
}

export function chromiumAvailable(): boolean {
  return fs.existsSync(CHROMIUM);
}

export async function openBrowser(
  baseUrl: string,
  options: { viewport?: { width: number; height: number } } = {},
): Promise<BrowserSession> {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ARGS, headless: true });
  const context = await browser.newContext({
    baseURL: baseUrl,
    viewport: options.viewport ?? { width: 1440, height: 900 },
    colorScheme: 'light',
  });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console error: ${message.text()} (${message.location().url})`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('requestfailed', (request) => {
    // A stream the page aborts on purpose (leaving a page, pressing Stop) is not a failure.
    if (request.failure()?.errorText === 'net::ERR_ABORTED') return;
    problems.push(`request failed: ${request.method()} ${request.url()} ${request.failure()?.errorText ?? ''}`);
  });
  fs.mkdirSync(SCREENSHOT_DIR, { recursive: true });
  return {
    browser,
    context,
    page,
    problems,
    async screenshot(name: string, options: { fullPage?: boolean } = {}) {
      const file = path.join(SCREENSHOT_DIR, `${name}.png`);
      await page.screenshot({ path: file, fullPage: options.fullPage ?? true });
      return file;
    },
    async close() {
      await context.close();
      await browser.close();
    },
  };
}
