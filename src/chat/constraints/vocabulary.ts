/**
 * The vocabulary as constrained decoding sees it: each token's bytes (base64) by id, for the engine's
 * `load_base`, so that it can walk tokens through a byte-level automaton. Special tokens (EOS among them)
 * and tokens without bytes get null: a constraint never allows them as text, and the engine decides EOS
 * from whether the automaton accepts. The tool-call format's marker tokens (Mistral's `[TOOL_CALLS]`) are
 * the exception even when special: a forced call in that format must be able to write them.
 */
import type { ChatTokenizer } from '../tokenizer.ts';

export function constraintTokenBytes(tokenizer: ChatTokenizer, markers: readonly string[] = []): (string | null)[] {
  const markerIds = new Set(markers.map((marker) => tokenizer.tokenId(marker)));
  return Array.from({ length: tokenizer.vocabSize }, (_, id) => {
    if (tokenizer.specialTokenIds.has(id) && !markerIds.has(id)) return null;
    const bytes = tokenizer.tokenBytes(id);
    return bytes && bytes.length > 0 ? Buffer.from(bytes).toString('base64') : null;
  });
}
