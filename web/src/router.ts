/**
 * Hash routes (`#/models/<id>?tab=…`): the server serves one page at `/`, so every dashboard URL works on
 * reload and the back button without server-side routes. A page renders into <main> and may return a
 * cleanup (stop polling, abort fetches) that runs when the route changes.
 */
export type Cleanup = () => void;

export interface RouteContext {
  params: Record<string, string>;
  query: URLSearchParams;
  main: HTMLElement;
  /** Aborted when the user leaves the page: pass it to fetches and stop loops on it. */
  signal: AbortSignal;
}

export type PageRender = (context: RouteContext) => void | Cleanup | Promise<void | Cleanup>;

interface Route {
  pattern: RegExp;
  names: string[];
  render: PageRender;
  nav: string;
}

const routes: Route[] = [];

export function route(path: string, nav: string, render: PageRender): void {
  const names: string[] = [];
  const pattern = new RegExp(
    `^${path.replace(/:([a-z_]+)/g, (_, name: string) => {
      names.push(name);
      return '([^/]+)';
    })}$`,
  );
  routes.push({ pattern, names, render, nav });
}

export function currentHash(): { path: string; query: URLSearchParams } {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, search = ''] = raw.split('?');
  return { path: path || '/', query: new URLSearchParams(search) };
}

export function href(path: string, params: Record<string, string | number | undefined | null> = {}): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params))
    if (value !== undefined && value !== null && value !== '') search.set(key, String(value));
  const text = search.toString();
  return `#${path}${text ? `?${text}` : ''}`;
}

export function navigate(path: string, params: Record<string, string | number | undefined | null> = {}): void {
  location.hash = href(path, params);
}

/** Changes the URL's query without re-rendering (the page already shows the new state). */
export function replaceQuery(params: Record<string, string | number | undefined | null>): void {
  const { path } = currentHash();
  history.replaceState(history.state, '', href(path, params));
}

let active: { cleanup?: Cleanup; controller: AbortController } | null = null;

export async function renderRoute(
  main: HTMLElement,
  onNav: (nav: string) => void,
  notFound: PageRender,
): Promise<void> {
  active?.controller.abort();
  active?.cleanup?.();
  const controller = new AbortController();
  active = { controller };
  const mine = active;
  const { path, query } = currentHash();
  let render = notFound;
  let params: Record<string, string> = {};
  let nav = '';
  for (const candidate of routes) {
    const match = candidate.pattern.exec(path);
    if (!match) continue;
    params = Object.fromEntries(candidate.names.map((name, index) => [name, decodeURIComponent(match[index + 1])]));
    render = candidate.render;
    nav = candidate.nav;
    break;
  }
  onNav(nav);
  main.replaceChildren();
  try {
    const cleanup = await render({ params, query, main, signal: controller.signal });
    if (cleanup && active === mine) mine.cleanup = cleanup;
    else if (cleanup) cleanup();
  } catch (error) {
    if (controller.signal.aborted) return;
    throw error;
  }
}
