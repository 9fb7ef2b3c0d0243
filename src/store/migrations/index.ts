/** The numbered migrations, in order. A new schema change is a new file appended here, never an edit of an old one. */
import type { Kysely } from 'kysely';
import * as m001 from './001-initial.ts';
import * as m002 from './002-training-jobs.ts';
import * as m003 from './003-artifacts.ts';
import * as m004 from './004-retention.ts';
import * as m005 from './005-trained-tokens.ts';
import * as m006 from './006-tinker.ts';
import * as m007 from './007-tinker-requests.ts';
import * as m008 from './008-artifact-type.ts';
import * as m010 from './010-client-records.ts';
import * as m011 from './011-stored-responses.ts';
import type { MigrationContext } from './context.ts';

export interface Migration {
  version: number;
  name: string;
  up: (db: Kysely<any>, context: MigrationContext) => Promise<void>;
}

export const MIGRATIONS: Migration[] = [
  { version: 1, name: 'initial', up: m001.up },
  { version: 2, name: 'training-jobs', up: m002.up },
  { version: 3, name: 'artifacts', up: m003.up },
  { version: 4, name: 'retention', up: m004.up },
  { version: 5, name: 'trained-tokens', up: m005.up },
  { version: 6, name: 'tinker', up: m006.up },
  { version: 7, name: 'tinker-requests', up: m007.up },
  { version: 8, name: 'artifact-type', up: m008.up },
  { version: 10, name: 'client-records', up: m010.up },
  { version: 11, name: 'stored-responses', up: m011.up },
];
