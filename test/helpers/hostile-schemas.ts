/** JSON schemas built to be costly, shared by the hostile-input tests and bench/constraint-limits.ts. */

/** `$defs` d0 … d9 where each refers to the next one ten times: a small schema whose expansion is 10^10. */
export function refFanOut(): { $defs: Record<string, unknown>; $ref: string } {
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < 10; i += 1) {
    defs[`d${i}`] =
      i === 9
        ? { type: 'string' }
        : {
            type: 'object',
            properties: Object.fromEntries(
              Array.from({ length: 10 }, (_, k) => [`k${k}`, { $ref: `#/$defs/d${i + 1}` }]),
            ),
          };
  }
  return { $defs: defs, $ref: '#/$defs/d0' };
}
