/**
 * Adapter uploads for the import route: the seeded export as is, or broken in the ways an archive can be
 * (cut short, bytes flipped, sizes and checksums that lie, members that escape, configs and safetensors
 * headers that are not what they claim), or valid but for one value no engine may compute with (NaN, ±Inf, beyond
 * ±65504), which must be refused. Built synchronously, since a request is drawn synchronously.
 */
import { adapterTensors, tarWithValue } from '../helpers/adapters.ts';
import { deepNesting } from './hostile.ts';
import type { Prng } from './prng.ts';

/** Values an adapter must never hold (engine/bounds.json: finite, at most 65504 in magnitude). */
export const BAD_VALUES = [Number.NaN, Infinity, -Infinity, 1e38, -3e38, 65505];

const BLOCK = 512;

/** One ustar header; `size` is what the header claims, `type` its typeflag ('0' file, '2' symlink, '5' directory). */
function header(name: string, size: number | string, type = '0'): Buffer {
  const block = Buffer.alloc(BLOCK);
  block.write(name.slice(0, 100), 0, 100, 'utf8');
  block.write('0000644\0', 100, 8, 'ascii');
  block.write(`${typeof size === 'number' ? size.toString(8).padStart(11, '0') : size}\0`, 124, 12, 'ascii');
  block.write(' '.repeat(8), 148, 8, 'ascii');
  block.write(type, 156, 1, 'ascii');
  if (type === '2') block.write('/etc/passwd', 157, 100, 'ascii');
  block.write('ustar\x0000', 257, 8, 'ascii');
  block.write(
    `${block
      .reduce((sum, byte) => sum + byte, 0)
      .toString(8)
      .padStart(6, '0')}\0 `,
    148,
    8,
    'ascii',
  );
  return block;
}

function tar(members: [string, Buffer, string?][]): Buffer {
  const parts = members.flatMap(([name, body, type]) => [
    header(name, body.length, type),
    body,
    Buffer.alloc((BLOCK - (body.length % BLOCK)) % BLOCK),
  ]);
  return Buffer.concat([...parts, Buffer.alloc(2 * BLOCK)]);
}

/** A safetensors file whose 8-byte header length and JSON header are as given. */
function safetensors(length: bigint, json: string): Buffer {
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(length);
  return Buffer.concat([prefix, Buffer.from(json)]);
}

const CONFIG = Buffer.from(
  JSON.stringify({ peft_type: 'LORA', r: 8, lora_alpha: 16, target_modules: ['q_proj', 'v_proj'] }),
);

function hostileTar(rng: Prng, valid: Buffer): Buffer {
  const flipped = Buffer.from(valid);
  return rng.pick<() => Buffer>([
    () => valid.subarray(0, rng.int(valid.length)),
    () => {
      for (let i = 0; i < 1 + rng.int(8); i += 1)
        flipped[rng.int(rng.chance(0.5) ? BLOCK : flipped.length)] ^= 1 << rng.int(8);
      return flipped;
    },
    () =>
      Buffer.concat([
        header('adapter_config.json', rng.pick(['77777777777', '99999999999', 'zzzzzzzzzzz', '-0000000001'])),
        valid.subarray(BLOCK),
      ]),
    () =>
      tar([
        [rng.pick(['../../evil', '/etc/x', 'a/../../b', 'adapter_config.json/', '']), CONFIG],
        ['adapter_model.safetensors', Buffer.from('x')],
      ]),
    () =>
      tar([
        ['adapter_config.json', CONFIG],
        ['adapter_config.json', CONFIG],
        ['adapter_model.safetensors', Buffer.alloc(0), rng.pick(['2', '5', '1'])],
      ]),
    () =>
      tar([
        [
          'adapter_config.json',
          Buffer.from(
            rng.pick([
              '{not json',
              '[]',
              'null',
              deepNesting(rng, 5000).text,
              JSON.stringify({ peft_type: 'LORA', r: 1e9, target_modules: ['x'.repeat(10_000)] }),
            ]),
          ),
        ],
        ['adapter_model.safetensors', Buffer.alloc(16)],
      ]),
    () =>
      tar([
        ['adapter_config.json', CONFIG],
        [
          'adapter_model.safetensors',
          rng.pick([
            safetensors(2n ** 63n, '{}'),
            safetensors(200n << 20n, '{}'),
            safetensors(40n, '{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}'.padEnd(40)),
            safetensors(
              60n,
              '{"base_model.model.q_proj.lora_A.weight":{"dtype":"F32","shape":[8,-1],"data_offsets":[0,0]}}',
            ),
            safetensors(3n, '{"a'),
          ]),
        ],
      ]),
    () => Buffer.from(rng.pick(['', 'not a tar', '\x1f\x8b\x08\x00', 'x'.repeat(2_000_000)])),
  ])();
}

/** The valid export with one value of a random tensor, at a random index, set to a value no adapter may hold. */
function poisonedTar(rng: Prng, valid: Buffer): { bytes: Buffer; value: number; tensor: string } {
  const tensor = rng.pick(adapterTensors(valid));
  const value = rng.pick(BAD_VALUES);
  return { bytes: tarWithValue(valid, value, tensor.name, [rng.int(tensor.elements)]), value, tensor: tensor.name };
}

/** The bytes and content type of an import request's body; `mustRefuse` says why a 2xx would be a finding. */
export function adapterUpload(
  rng: Prng,
  valid: Buffer,
  hostile: boolean,
): { bytes: Buffer; contentType: string; mustRefuse?: string } {
  const contentType =
    hostile && rng.chance(0.2)
      ? rng.pick(['application/json', 'text/plain', 'application/x-tar; charset=utf-8', 'application/gzip'])
      : rng.pick(['application/x-tar', 'application/octet-stream']);
  if (hostile && rng.chance(0.3)) {
    const poisoned = poisonedTar(rng, valid);
    return {
      bytes: poisoned.bytes,
      contentType,
      mustRefuse: `an adapter holding ${poisoned.value} in ${poisoned.tensor} was imported`,
    };
  }
  return { bytes: hostile ? hostileTar(rng, valid) : valid, contentType };
}
