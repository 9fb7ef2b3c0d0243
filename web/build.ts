/**
 * Builds the dashboard with esbuild: web/src/main.ts (and the CSS it imports) → one minified, content-hashed
 * JS and CSS file, plus index.html pointing at them. The server runs this in memory when it starts (about
 * 100 ms), so what it serves always matches the checkout; `npx tsx web/build.ts` writes the same files to
 * web/dist/ for a look or for serving them elsewhere.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as esbuild from 'esbuild';

export interface DashboardAsset {
  body: Buffer;
  contentType: string;
  /** Content-hashed names never change content, so browsers may cache them forever. */
  immutable: boolean;
}

export interface DashboardBundle {
  /** URL path → file, e.g. `/`, `/assets/main-3FJ2K.js`, `/favicon.svg`. */
  files: Map<string, DashboardAsset>;
  buildMs: number;
}

const webDir = path.dirname(fileURLToPath(import.meta.url));

const CONTENT_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.svg': 'image/svg+xml',
};

const FAVICON = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#141a26"/><path d="M6 23 L13 14 L18 18 L26 8" fill="none" stroke="#7b93ff" stroke-width="3" stroke-linecap="round" stroke-linejoin="round"/></svg>`;

export async function buildDashboard(options: { minify?: boolean } = {}): Promise<DashboardBundle> {
  const started = performance.now();
  const result = await esbuild.build({
    entryPoints: [path.join(webDir, 'src', 'main.ts')],
    bundle: true,
    format: 'esm',
    target: ['es2022', 'chrome110', 'firefox115', 'safari16'],
    minify: options.minify ?? true,
    sourcemap: 'linked',
    write: false,
    outdir: path.join(webDir, 'dist', 'assets'),
    entryNames: '[name]-[hash]',
    legalComments: 'none',
    charset: 'utf8',
    logLevel: 'silent',
    tsconfig: path.join(webDir, 'tsconfig.json'),
  });
  const files = new Map<string, DashboardAsset>();
  let script = '';
  let stylesheet = '';
  for (const file of result.outputFiles) {
    const name = path.basename(file.path);
    const urlPath = `/assets/${name}`;
    const extension = path.extname(name);
    files.set(urlPath, {
      body: Buffer.from(file.contents),
      contentType: CONTENT_TYPES[extension] ?? 'application/octet-stream',
      immutable: true,
    });
    if (extension === '.js') script = urlPath;
    if (extension === '.css') stylesheet = urlPath;
  }
  if (!script || !stylesheet) throw new Error('the dashboard build produced no script or stylesheet');
  const html = fs
    .readFileSync(path.join(webDir, 'index.html'), 'utf8')
    .replace('%SCRIPT%', script)
    .replace('%STYLESHEET%', stylesheet);
  files.set('/', { body: Buffer.from(html), contentType: CONTENT_TYPES['.html'], immutable: false });
  files.set('/favicon.svg', { body: Buffer.from(FAVICON), contentType: CONTENT_TYPES['.svg'], immutable: false });
  return { files, buildMs: performance.now() - started };
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const bundle = await buildDashboard();
  const outDir = path.join(webDir, 'dist');
  fs.rmSync(outDir, { recursive: true, force: true });
  for (const [urlPath, file] of bundle.files) {
    const target = path.join(outDir, urlPath === '/' ? 'index.html' : urlPath);
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.writeFileSync(target, file.body);
    console.log(`${path.relative(process.cwd(), target)}  ${(file.body.length / 1024).toFixed(1)} KiB`);
  }
  console.log(`built in ${bundle.buildMs.toFixed(0)} ms`);
}
