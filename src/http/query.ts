/** Query-string parsing with FastAPI-shaped problems, kept explicit so body schemas never coerce types. */
import { validationError } from '../errors.ts';

export function queryInteger(
  query: Record<string, unknown>,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = query[name];
  if (raw === undefined) return fallback;
  const value = typeof raw === 'string' && /^-?\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(value)) {
    throw validationError([{ loc: ['query', name], msg: 'Input should be a valid integer', type: 'int_parsing' }]);
  }
  if (value < min)
    throw validationError([
      { loc: ['query', name], msg: `Input should be greater than or equal to ${min}`, type: 'greater_than_equal' },
    ]);
  if (value > max)
    throw validationError([
      { loc: ['query', name], msg: `Input should be less than or equal to ${max}`, type: 'less_than_equal' },
    ]);
  return value;
}

export function queryEnum<T extends string>(
  query: Record<string, unknown>,
  name: string,
  allowed: readonly T[],
  fallback: T,
): T {
  const raw = query[name];
  if (raw === undefined) return fallback;
  if (typeof raw !== 'string' || !allowed.includes(raw as T)) {
    throw validationError([
      {
        loc: ['query', name],
        msg: `Input should be ${allowed.map((a) => `'${a}'`).join(' or ')}`,
        type: 'literal_error',
      },
    ]);
  }
  return raw as T;
}

export function queryString(query: Record<string, unknown>, name: string): string | undefined {
  const raw = query[name];
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string')
    throw validationError([{ loc: ['query', name], msg: 'Input should be a valid string', type: 'string_type' }]);
  return raw;
}
