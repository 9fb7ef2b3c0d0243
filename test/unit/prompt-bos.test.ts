/** src/conversation/prompt.ts: the BOS token is written once, by the template or else by the tokenizer config's add_bos_token. */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { renderPrompt } from '../../src/conversation/prompt.ts';
import { loadTokenizer } from '../../src/conversation/tokenizer.ts';
import { writeTokenizerFolder } from '../helpers/families.ts';

describe('BOS: written once, whether the template writes it or the tokenizer config asks for it', () => {
  test('Llama 3.1: the template writes <|begin_of_text|>; add_bos_token adds it only where a template does not', async () => {
    const folder = writeTokenizerFolder('llama3.1');
    const configFile = path.join(folder, 'tokenizer_config.json');
    const config = JSON.parse(fs.readFileSync(configFile, 'utf8'));
    fs.writeFileSync(configFile, JSON.stringify({ ...config, add_bos_token: true }));
    const tokenizer = await loadTokenizer(folder);
    const bos = tokenizer.tokenId('<|begin_of_text|>')!;
    const input = { messages: [{ role: 'user', content: 'hi' }], addGenerationPrompt: true };
    const own = renderPrompt(tokenizer, { ...input, template: config.chat_template }).ids;
    assert.equal(own[0], bos);
    assert.notEqual(own[1], bos, 'no second BOS');
    const bare = renderPrompt(tokenizer, {
      ...input,
      template: '{% for m in messages %}{{ m.content }}{% endfor %}',
    }).ids;
    assert.deepEqual(bare, [bos, ...tokenizer.encode('hi')]);
  });
});
