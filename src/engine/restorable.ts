/**
 * What a restarted engine must hold again: the bases and adapters it was asked to load, remembered from the
 * ops that change them (one hook per such op, in `HOOKS`) and replayed in the order they were last asked for.
 * The supervisor calls `remember` after every successful reply; ops without a hook leave nothing to restore.
 */
import type { EngineClient } from './client.ts';
import type { EngineLogger } from './logger.ts';
import type { OpReply, OpRequest, UnaryOp } from './ops.ts';
import type { EnsureAdapterRequest, LoadBaseRequest } from './protocol.ts';

type Hook<O extends UnaryOp> = (state: Restorable, request: OpRequest<O>, reply: OpReply<O>) => void;

const HOOKS: { [O in UnaryOp]?: Hook<O> } = {
  load_base: (state, request) => state.keepBase(request),
  ensure_adapter: (state, request) => state.keepAdapter(request),
  // Once saved, the adapter comes back from its files after a restart (optimizer state too), not from its init.
  save_adapter: (state, request) => state.movedTo(request.adapter, request.path),
  save_state: (state, request) => state.movedTo(request.adapter, request.path),
  load_state: (state, request) =>
    state.keepAdapter({ adapter: request.adapter, base: request.base, path: request.path }),
  drop_adapter: (state, request) => state.adapters.delete(request.adapter),
};

export class Restorable {
  readonly bases = new Map<string, LoadBaseRequest>();
  readonly adapters = new Map<string, EnsureAdapterRequest>();

  /** `maxAdapters`: how many of the most recently used adapters come back; the engine keeps no more resident anyway. */
  constructor(private readonly maxAdapters: number) {}

  remember<O extends UnaryOp>(op: O, request: OpRequest<O>, reply: OpReply<O>): void {
    (HOOKS[op] as Hook<O> | undefined)?.(this, request, reply);
  }

  keepBase(request: LoadBaseRequest): void {
    this.bases.delete(request.base);
    this.bases.set(request.base, request);
  }

  keepAdapter(request: EnsureAdapterRequest): void {
    this.adapters.delete(request.adapter);
    this.adapters.set(request.adapter, request);
    const oldest = this.adapters.keys().next().value;
    if (this.adapters.size > this.maxAdapters && oldest !== undefined) this.adapters.delete(oldest);
  }

  movedTo(adapter: string, path: string): void {
    const known = this.adapters.get(adapter);
    if (known) this.keepAdapter({ adapter, base: known.base, path });
  }

  /** Loads everything again on a fresh engine; a failure is logged and the rest goes on. */
  async restore(client: EngineClient, logger: EngineLogger): Promise<void> {
    for (const request of this.bases.values()) {
      await client.request('load_base', request).then(
        () => logger.info({ base: request.base }, 'base reloaded after restart'),
        (error: Error) => logger.warn({ base: request.base, error: error.message }, 'base not reloaded after restart'),
      );
    }
    // Oldest first, so the engine's LRU order after the restart is the order before it.
    for (const request of this.adapters.values()) {
      await client.request('ensure_adapter', request).then(
        () => logger.info({ adapter: request.adapter }, 'adapter reloaded after restart'),
        (error: Error) =>
          logger.warn({ adapter: request.adapter, error: error.message }, 'adapter not reloaded after restart'),
      );
    }
  }
}
