/**
 * SFT training data: the data file of an artifact read line by line (never whole), each line a
 * conversation (`{messages, tools}`, as ART uploads it) or a trajectory (`messages_and_choices`).
 * A malformed line is an error naming the file and line number.
 */
import readline from 'node:readline';
import type { Readable } from 'node:stream';
import { JobError } from '../../errors.ts';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../json-limits.ts';

/** The data file names we accept, in order of preference. */
export const SFT_DATA_FILES = ['train.jsonl', 'trajectories.jsonl'] as const;

export interface Conversation {
  line: number;
  messages: Record<string, unknown>[];
  tools: unknown[] | null;
}

export function parseConversation(file: string, line: number, text: string): Conversation {
  // Checked before parsing, as for request bodies: the line goes on to the engine through JSON.stringify.
  if (nestsDeeperThan(text))
    throw new JobError(
      'bad_training_data',
      `${file} line ${line}: nests objects and arrays deeper than ${MAX_JSON_DEPTH} levels`,
    );
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new JobError('bad_training_data', `${file} line ${line}: not valid JSON (${(error as Error).message})`);
  }
  const record = value as Record<string, unknown> | null;
  const messages = record?.messages ?? record?.messages_and_choices;
  if (
    !record ||
    typeof record !== 'object' ||
    !Array.isArray(messages) ||
    messages.some((m) => !m || typeof m !== 'object')
  ) {
    throw new JobError(
      'bad_training_data',
      `${file} line ${line}: expected an object with a "messages" array of message objects`,
    );
  }
  const tools = record.tools;
  if (tools !== undefined && tools !== null && !Array.isArray(tools))
    throw new JobError('bad_training_data', `${file} line ${line}: "tools" must be an array`);
  return {
    line,
    messages: messages as Record<string, unknown>[],
    tools: (tools as unknown[] | null | undefined) ?? null,
  };
}

/** Every non-blank line of the file, as conversations, streaming. */
export async function* readConversations(file: string, stream: Readable): AsyncIterable<Conversation> {
  const lines = readline.createInterface({ input: stream, crlfDelay: Infinity });
  let number = 0;
  for await (const text of lines) {
    number += 1;
    if (text.trim() === '') continue;
    yield parseConversation(file, number, text);
  }
}

export async function countConversations(stream: Readable): Promise<number> {
  const lines = readline.createInterface({ input: stream, crlfDelay: Infinity });
  let count = 0;
  for await (const text of lines) if (text.trim() !== '') count += 1;
  return count;
}
