/**
 * What the dashboard benchmarks share: a fresh server with the tiny model, headless Chromium whose pages are
 * signed in with the server's key, both closed afterwards; without Chromium a benchmark says so and exits 0.
 */
import { type BrowserSession, CHROMIUM, chromiumAvailable, openBrowser } from '../test/helpers/browser.ts';
import { type E2eServer, startE2eServer } from '../test/helpers/server.ts';

/** Runs `bench` with the server and the browser session; pages it opens from `session.context` carry the key. */
export async function benchDashboard(bench: (e2e: E2eServer, session: BrowserSession) => Promise<void>): Promise<void> {
  if (!chromiumAvailable()) {
    console.log(`no Chromium at ${CHROMIUM}; scripts/install.sh installs it`);
    return;
  }
  const e2e = await startE2eServer();
  const session = await openBrowser(e2e.url);
  try {
    await session.context.addInitScript((key) => sessionStorage.setItem('agent-trainer.api-key', key), e2e.key);
    await bench(e2e, session);
  } finally {
    await session.close();
    await e2e.close();
  }
}
