/**
 * Adapter weights with chosen values, as a test or the fuzzer makes them: a value set inside a safetensors file (or
 * the one inside an exported adapter tar, patched in place: tar does not checksum member data). The engine writes
 * F32 tensors, so that is the only dtype handled.
 */

/** Where a NaN adapter was first found poisoned (it corrupted other tenants' rows): layer 0's down_proj lora_A. */
export const DOWN_PROJ_A = 'base_model.model.model.layers.0.mlp.down_proj.lora_A.weight';

/** Where `tensor`'s data starts in a safetensors file. */
function dataOffset(file: Buffer, tensor: string): number {
  const length = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + length).toString('utf8')) as Record<
    string,
    { dtype: string; data_offsets: number[] }
  >;
  const entry = header[tensor];
  if (entry?.dtype !== 'F32') throw new Error(`no F32 tensor ${tensor} in this safetensors file`);
  return 8 + length + entry.data_offsets[0];
}

/** A copy of a safetensors file whose F32 elements `indices` of `tensor` hold `value`. */
export function withValue(file: Buffer, value: number, tensor = DOWN_PROJ_A, indices = [0, 1, 2, 3]): Buffer {
  const copy = Buffer.from(file);
  const start = dataOffset(copy, tensor);
  for (const index of indices) copy.writeFloatLE(value, start + 4 * index);
  return copy;
}

/** Where the adapter_model.safetensors member of a tar starts, and its size. */
function weightsMember(tar: Buffer): { start: number; size: number } {
  for (let at = 0; at + 512 <= tar.length; ) {
    const name = tar
      .subarray(at, at + 100)
      .toString('utf8')
      .replace(/\0.*$/s, '');
    const size = parseInt(
      tar
        .subarray(at + 124, at + 136)
        .toString('ascii')
        .replace(/\0.*$/s, '')
        .trim() || '0',
      8,
    );
    if (!name) break;
    if (name.split('/').at(-1) === 'adapter_model.safetensors') return { start: at + 512, size };
    at += 512 + Math.ceil(size / 512) * 512;
  }
  throw new Error('no adapter_model.safetensors in this tar');
}

/** A copy of an adapter tar whose adapter_model.safetensors member has `value` at `indices` of `tensor`. */
export function tarWithValue(tar: Buffer, value: number, tensor = DOWN_PROJ_A, indices = [0, 1, 2, 3]): Buffer {
  const { start, size } = weightsMember(tar);
  return Buffer.concat([
    tar.subarray(0, start),
    withValue(tar.subarray(start, start + size), value, tensor, indices),
    tar.subarray(start + size),
  ]);
}

/** The tensors of an adapter tar's weights, with their element counts. */
export function adapterTensors(tar: Buffer): { name: string; elements: number }[] {
  const { start } = weightsMember(tar);
  const length = Number(tar.readBigUInt64LE(start));
  const header = JSON.parse(tar.subarray(start + 8, start + 8 + length).toString('utf8')) as Record<
    string,
    { shape?: number[] }
  >;
  return Object.entries(header)
    .filter(([name]) => name !== '__metadata__')
    .map(([name, entry]) => ({ name, elements: (entry.shape ?? []).reduce((n, d) => n * d, 1) }));
}
