/**
 * The SFT data checked on this machine before anything is uploaded: every line of every data file parsed as the
 * server's job will parse it (training/sft/data.ts), and every problem reported with its file and line number at once,
 * instead of the first one surfacing after an upload and a training step.
 */
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { parseConversation, SFT_DATA_FILES } from '../training/sft/data.ts';

/** Problems listed in full up to this many; beyond it only counted. */
const MAX_LISTED = 20;

export interface SftCheck {
  files: { file: string; conversations: number }[];
  problems: string[];
  /** Problems found beyond those listed. */
  unlisted: number;
}

/** The data files among the inputs: `.jsonl` files given directly, and the SFT data files of folders given. */
function dataFiles(inputs: string[]): string[] {
  return inputs.flatMap((input) => {
    if (!fs.statSync(input).isDirectory()) return input.endsWith('.jsonl') ? [input] : [];
    return SFT_DATA_FILES.map((name) => path.join(input, name)).filter((file) => fs.existsSync(file));
  });
}

export async function checkSftData(inputs: string[]): Promise<SftCheck> {
  const check: SftCheck = { files: [], problems: [], unlisted: 0 };
  const files = dataFiles(inputs);
  if (files.length === 0)
    check.problems.push(
      `no SFT data among ${inputs.join(', ')}: expected a .jsonl file or a folder with ${SFT_DATA_FILES.join(' or ')}`,
    );
  for (const file of files) {
    let conversations = 0;
    let number = 0;
    for await (const text of readline.createInterface({ input: fs.createReadStream(file), crlfDelay: Infinity })) {
      number += 1;
      if (text.trim() === '') continue;
      try {
        parseConversation(file, number, text);
        conversations += 1;
      } catch (error) {
        if (check.problems.length < MAX_LISTED) check.problems.push((error as Error).message);
        else check.unlisted += 1;
      }
    }
    if (conversations === 0 && number > 0 && check.problems.length === 0)
      check.problems.push(`${file}: no conversations (only blank lines)`);
    check.files.push({ file, conversations });
  }
  return check;
}

export function describeProblems(check: SftCheck): string {
  return [...check.problems, ...(check.unlisted ? [`… and ${check.unlisted} more`] : [])].join('\n');
}
