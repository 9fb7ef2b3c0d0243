/**
 * Writing Lark grammars (llguidance's dialect, which vLLM's `guidance` backend accepts as `structured_outputs.grammar`):
 * string literals, inline JSON schemas, the calls a forced tool call chooses among, which each tool-call format
 * (src/conversation/tool-calls/) turns into its own text, and structural tags. Both sampler engines get the same grammar.
 */
/** A Lark string literal for `text` (JSON's escapes are Lark's). */
export const larkString = (text: string): string => JSON.stringify(text);

/** A rule body that is JSON matching `schema` (llguidance's `%json`); an absent schema is any object. */
export const larkJson = (schema: unknown): string => `%json ${JSON.stringify(schema ?? { type: 'object' })}`;

/**
 * How a marker text (`<tool_call>`, `[TOOL_CALLS]`) is written in a grammar for one tokenizer: as the token itself
 * (`<[id]>`) where the tokenizer has it as an added token, else as text. llguidance treats every added token as a
 * special one that text cannot spell, special or not in tokenizer.json; a text literal equal to one would be
 * offered the token in a mask and then refuse it.
 */
export type MarkerSyntax = (marker: string) => string;

export function markerSyntax(addedTokenId: (marker: string) => number | undefined): MarkerSyntax {
  return (marker) => {
    const id = addedTokenId(marker);
    return id === undefined ? larkString(marker) : `<[${id}]>`;
  };
}

/** One tool a forced call may name: its name and the arguments' schema (a rule body, `larkJson`). */
export interface ForcedTool {
  name: string;
  arguments: string;
}

/** The tools of a forced call, and whether several calls may follow one another (`tool_choice: "required"`). */
export interface ForcedCalls {
  tools: ForcedTool[];
  multiple: boolean;
}

/** How one format writes forced calls: `call(name, argumentsRule)` is one call; several are joined by `separator`. */
export interface CallSyntax {
  separator: string;
  call(name: string, argumentsRule: string): string;
  /** What surrounds the calls (Mistral's `[TOOL_CALLS][…]`); nothing when absent. */
  around?(callsRule: string): string;
}

/** The grammar of a forced call: one call of one of the tools, or (multiple) one or more of them. */
export function forcedCallGrammar(calls: ForcedCalls, syntax: CallSyntax): string {
  const lines = [
    `start: ${syntax.around ? syntax.around('calls') : 'calls'}`,
    calls.multiple ? `calls: call (${larkString(syntax.separator)} call)*` : 'calls: call',
    `call: ${calls.tools.map((_, i) => `call_${i}`).join(' | ')}`,
  ];
  calls.tools.forEach((tool, i) => {
    lines.push(`call_${i}: ${syntax.call(tool.name, `arguments_${i}`)}`, `arguments_${i}: ${tool.arguments}`);
  });
  return `${lines.join('\n')}\n`;
}

/** One structure of a structural tag: after `begin` (which starts with one of the triggers), JSON of `schema`, then `end`. */
export interface StructuralTagStructure {
  begin: string;
  schema: Record<string, unknown> | boolean;
  end: string;
}

/**
 * A structural tag as a request states it (vLLM's `triggers` and `structures`). The server's own: it is written as a
 * grammar (`structuralTagGrammar`) once the base is known, so no engine ever sees one.
 */
export interface StructuralTag {
  triggers: string[];
  structures: StructuralTagStructure[];
}

/**
 * A structural tag as a grammar: free text in which each trigger opens its
 * structure's `begin`, JSON of its schema and its `end`, written as llguidance's StructTag.to_grammar writes it
 * (a lazy trigger in text, or text up to a trigger that is a token), except that a trigger, the rest of a begin
 * and an end are tokens only where they are added tokens of the base's tokenizer (`marker`) and literal text
 * otherwise: llguidance's own takes any `<…>` trigger for a special token, so `<fn>` named a token no vocabulary had.
 */
export function structuralTagGrammar(tag: StructuralTag, marker: MarkerSyntax): string {
  const lines = [
    '%llguidance {}',
    `start: (${tag.structures.map((_, i) => `tag_${i}`).join(' | ')})* tag_end`,
    'tag_end: TAG_TEXT',
    'TAG_TEXT: /(.|\\n)*/',
  ];
  tag.structures.forEach((structure, i) => {
    const trigger = tag.triggers.find((candidate) => structure.begin.startsWith(candidate)) as string;
    const rest = structure.begin.slice(trigger.length);
    const body = [rest && marker(rest), larkJson(structure.schema), structure.end && marker(structure.end)]
      .filter(Boolean)
      .join(' ');
    const opener = marker(trigger);
    if (opener === larkString(trigger))
      lines.push(`tag_${i}_trig[lazy]: TAG_TEXT ${opener}`, `tag_${i}: tag_${i}_trig ${body}`);
    else lines.push(`tag_${i}: TAG_TEXT ${opener} ${body}`);
  });
  return `${lines.join('\n')}\n`;
}
