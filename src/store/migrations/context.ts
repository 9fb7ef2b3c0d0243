/** What a migration is told about the database it runs on; the migrations import it, so it imports none of them. */
import type { ColumnDefinitionBuilder } from 'kysely';

export type Dialect = 'sqlite' | 'postgres';

/** What differs between the two databases when creating tables. */
export interface MigrationContext {
  dialect: Dialect;
  serialType: 'integer' | 'serial';
  serialConstraint: (column: ColumnDefinitionBuilder) => ColumnDefinitionBuilder;
}

export function migrationContext(dialect: Dialect): MigrationContext {
  return dialect === 'postgres'
    ? { dialect, serialType: 'serial', serialConstraint: (c) => c.primaryKey() }
    : { dialect, serialType: 'integer', serialConstraint: (c) => c.primaryKey().autoIncrement() };
}
