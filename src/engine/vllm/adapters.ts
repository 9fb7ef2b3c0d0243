/**
 * The LoRA adapters one vLLM server holds, by our adapter key (its `lora_name`), each from its checkpoint's own
 * PEFT folder: loaded by `POST /v1/load_lora_adapter`, the least recently used one unloaded beyond `maxAdapters`
 * (our engine's policy: an LRU of 32, and a request names its adapter's folder so an evicted one comes back), and
 * every one loaded again after the server restarts (it forgets them). An adapter a request is using is not unloaded.
 */
import { EngineError } from '../errors.ts';
import type { EngineLogger } from '../logger.ts';
import type { VllmHttp } from './http.ts';

interface Held {
  base: string;
  path: string;
  /** Requests using it now. */
  users: number;
}

export class VllmAdapters {
  /** Loaded (or loading) adapters, least recently used first. */
  private readonly held = new Map<string, Held>();
  private readonly loading = new Map<string, Promise<void>>();

  constructor(
    private readonly maxAdapters: number,
    private readonly logger: EngineLogger,
  ) {}

  get names(): string[] {
    return [...this.held.keys()];
  }

  /** Loads the adapter unless it is held (then it becomes the most recent); evicts beyond the limit. */
  async ensure(http: VllmHttp, key: string, base: string, path: string): Promise<boolean> {
    const known = this.held.get(key);
    if (known && known.path === path) {
      this.held.delete(key);
      this.held.set(key, known);
      await this.loading.get(key);
      return false;
    }
    this.held.delete(key);
    this.held.set(key, { base, path, users: known?.users ?? 0 });
    const load = this.load(http, key, path);
    this.loading.set(key, load);
    try {
      await load;
    } catch (error) {
      if (this.held.get(key)?.path === path) this.held.delete(key);
      throw error;
    } finally {
      if (this.loading.get(key) === load) this.loading.delete(key);
    }
    await this.evict(http);
    return true;
  }

  async drop(http: VllmHttp, key: string): Promise<boolean> {
    if (!this.held.delete(key)) return false;
    await this.unload(http, key);
    return true;
  }

  /** vLLM no longer holds it (it restarted behind our back): the next `ensure` loads it again. */
  forget(key: string): void {
    this.held.delete(key);
  }

  /** Marks the adapter in use for one request (so it is not evicted under it); returns the release. */
  use(key: string): () => void {
    const held = this.held.get(key);
    if (held) held.users += 1;
    return () => {
      if (held) held.users = Math.max(0, held.users - 1);
    };
  }

  /** After a restart: every held adapter again, oldest first (so vLLM's own LRU order is ours). */
  async restore(http: VllmHttp): Promise<void> {
    for (const [key, held] of this.held) {
      await this.load(http, key, held.path).then(
        () => this.logger.info({ adapter: key }, 'adapter reloaded into vLLM after its restart'),
        (error: Error) => {
          this.held.delete(key);
          this.logger.warn({ adapter: key, error: error.message }, 'adapter not reloaded into vLLM after its restart');
        },
      );
    }
  }

  /** `load_inplace`: a name vLLM still holds (it outlived our server) is replaced rather than refused. */
  private async load(http: VllmHttp, key: string, path: string): Promise<void> {
    try {
      await http.json(
        'POST',
        '/v1/load_lora_adapter',
        { lora_name: key, lora_path: path, load_inplace: true },
        { timeoutMs: 300_000 },
      );
    } catch (error) {
      if (error instanceof EngineError && (error.code === 'bad_request' || error.code === 'internal')) {
        throw new EngineError('bad_request', `vLLM could not load the adapter ${key} from ${path}: ${error.message}`);
      }
      throw error;
    }
  }

  private async unload(http: VllmHttp, key: string): Promise<void> {
    await http
      .json('POST', '/v1/unload_lora_adapter', { lora_name: key }, { timeoutMs: 60_000 })
      .catch((error: EngineError) => {
        if (error.code !== 'not_found')
          this.logger.warn({ adapter: key, error: error.message }, 'vLLM did not unload an adapter');
      });
  }

  private async evict(http: VllmHttp): Promise<void> {
    for (const [key, held] of this.held) {
      if (this.held.size <= this.maxAdapters) return;
      if (held.users > 0 || this.loading.has(key)) continue;
      this.held.delete(key);
      await this.unload(http, key);
    }
  }
}
