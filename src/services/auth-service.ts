/**
 * API keys and who they act for. A key belongs to one user entity, which may be a member of teams;
 * only the key's SHA-256 is stored, so a leaked database leaks no usable key.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Clock } from '../clock.ts';
import { AppError } from '../errors.ts';
import { newId } from '../ids.ts';
import type { IdentityRepository } from '../store/identity-repository.ts';

export const BOOTSTRAP_ENTITY = 'local';
export const BOOTSTRAP_KEY_FILE = 'bootstrap-api-key';
const ENTITY_NAME = /^[A-Za-z0-9._-]{1,128}$/;

/** Who a request acts as: its own user entity first, then every team it belongs to. */
export interface Principal {
  entityId: string;
  entityName: string;
  entities: { id: string; name: string }[];
}

export function canActFor(principal: Principal, entityId: string): boolean {
  return principal.entities.some((entity) => entity.id === entityId);
}

export function hashApiKey(key: string): string {
  return crypto.createHash('sha256').update(key).digest('hex');
}

export function generateApiKey(): string {
  // 32 random bytes are exactly 43 url-safe base64 characters.
  return `sk-${crypto.randomBytes(32).toString('base64url')}`;
}

export class AuthService {
  constructor(
    private readonly identities: IdentityRepository,
    private readonly clock: Clock,
  ) {}

  async authenticate(authorization: string | undefined): Promise<Principal> {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
    if (!match) throw new AppError('unauthorized', 'Missing API key: send "Authorization: Bearer <key>"');
    return this.authenticateKey(match[1]);
  }

  /** The principal of a key however it arrived (a bearer token, W&B's basic auth). */
  async authenticateKey(apiKey: string): Promise<Principal> {
    const key = await this.identities.findActiveKey(hashApiKey(apiKey));
    if (!key) throw new AppError('unauthorized', 'Invalid or revoked API key');
    return {
      entityId: key.entityId,
      entityName: key.entityName,
      entities: [{ id: key.entityId, name: key.entityName }, ...key.memberOf],
    };
  }

  /**
   * On an empty database: creates the `local` entity and its first key (the configured one, or a random one),
   * written to an owner-only file in the data folder. Answers the key only when it was made now.
   */
  async bootstrap(dataDir: string, configuredKey: string | null): Promise<{ key: string; file: string } | null> {
    if ((await this.identities.countEntities()) > 0) return null;
    const key = configuredKey ?? generateApiKey();
    await this.createKey(BOOTSTRAP_ENTITY, key);
    fs.mkdirSync(dataDir, { recursive: true });
    const file = path.join(dataDir, BOOTSTRAP_KEY_FILE);
    fs.writeFileSync(file, `${key}\n`, { mode: 0o600 });
    fs.chmodSync(file, 0o600);
    return { key, file };
  }

  /** Creates a key for a user entity, creating the entity when it does not exist yet. */
  async createKey(
    entityName: string,
    key: string = generateApiKey(),
  ): Promise<{ key: string; id: string; entityId: string }> {
    const entity = await this.ensureEntity(entityName, 'user');
    const id = newId();
    await this.identities.insertApiKey({
      id,
      entityId: entity.id,
      keyHash: hashApiKey(key),
      keyPrefix: key.slice(0, 7),
      createdAt: this.clock.now().toISOString(),
    });
    return { key, id, entityId: entity.id };
  }

  /** Makes `memberName` a member of team `teamName` (the team is created when missing). */
  async addMembership(teamName: string, memberName: string): Promise<void> {
    const member = await this.identities.findEntityByName(memberName);
    if (!member) throw new AppError('not_found', `entity ${memberName} not found`);
    const team = await this.ensureEntity(teamName, 'team');
    await this.identities.addMembership(team.id, member.id, this.clock.now().toISOString());
  }

  listKeys() {
    return this.identities.listKeys();
  }

  /** Accepts a key id or the key itself; answers whether a live key was revoked. */
  async revokeKey(idOrKey: string): Promise<boolean> {
    const target = idOrKey.startsWith('sk-') ? hashApiKey(idOrKey) : idOrKey;
    return (await this.identities.revokeKey(target, this.clock.now().toISOString())) > 0;
  }

  private async ensureEntity(name: string, kind: 'user' | 'team') {
    if (!ENTITY_NAME.test(name))
      throw new AppError(
        'bad_request',
        `entity name ${JSON.stringify(name)}: use 1-128 letters, digits, ".", "_" or "-"`,
      );
    const existing = await this.identities.findEntityByName(name);
    if (existing) return existing;
    const entity = { id: newId(), name, kind, created_at: this.clock.now().toISOString() };
    await this.identities.insertEntity(entity);
    return entity;
  }
}
