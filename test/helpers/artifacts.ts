/** Uploads files as an artifact version over real HTTP, as the CLI and ART do. */
import type { E2eServer } from './server.ts';

export async function uploadArtifact(
  e2e: E2eServer,
  path: string,
  files: Record<string, string>,
): Promise<{ url: string; version: string }> {
  const form = new FormData();
  for (const [name, content] of Object.entries(files)) form.append('file', new Blob([content]), name);
  const response = await fetch(`${e2e.url}/v1/preview/artifacts/${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${e2e.key}` },
    body: form,
  });
  if (response.status !== 200) throw new Error(`upload failed: ${response.status} ${await response.text()}`);
  return (await response.json()) as { url: string; version: string };
}
