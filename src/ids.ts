/** Identifiers: UUIDv7 everywhere, so ids sort in creation order and cursors are cheap index seeks. */
import { uuidv7 } from 'uuidv7';

export const newId = (): string => uuidv7();
