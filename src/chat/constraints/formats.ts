/**
 * JSON Schema string `format`s as whole-string regexes, each a subset of what ajv-formats accepts, so
 * that an output always validates: dates never use a 29th of February (no leap-year arithmetic), times
 * always carry a zone, hostnames have at most three labels. Other formats are refused by name.
 */
import { regexPattern } from './regex.ts';
import { type Pattern } from './pattern.ts';
import { unsupported } from './constraint-error.ts';

const DAY_OF_MONTH = '(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))';
const DATE = `[0-9]{4}-${DAY_OF_MONTH}`;
const TIME = '(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])';
const OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
const LABEL = '[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?';

const FORMATS: Record<string, string> = {
  date: DATE,
  time: TIME,
  'date-time': `${DATE}T${TIME}`,
  uuid: '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}',
  ipv4: `${OCTET}(?:\\.${OCTET}){3}`,
  hostname: `${LABEL}(?:\\.${LABEL}){0,2}`,
  email: `[a-zA-Z0-9_+-]+(?:\\.[a-zA-Z0-9_+-]+)*@${LABEL}(?:\\.${LABEL}){1,2}`,
};

const SUPPORTED_FORMATS = Object.keys(FORMATS);

/** The decoded characters of a string in `format`. */
export function formatPattern(format: string): Pattern {
  const source = FORMATS[format];
  if (source === undefined) throw unsupported(`string format ${JSON.stringify(format)} (supported: ${SUPPORTED_FORMATS.join(', ')})`);
  return regexPattern(source);
}
