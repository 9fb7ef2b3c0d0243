/** Paged lists: the page a repository reads, and the envelope every list endpoint answers it in (cursors are ids). */
import { Type } from '@sinclair/typebox';

/** One page as repositories and services hand it up: the items, and whether more follow. */
export interface Page<T> {
  items: T[];
  hasMore: boolean;
}

/** A page of any list endpoint, as `listEnvelope` declares it on the wire. */
export interface ListPage<T> {
  object: 'list';
  data: T[];
  has_more: boolean;
  first_id: string;
  last_id: string;
}

export function listEnvelope<T extends ReturnType<typeof Type.Object>>(item: T) {
  return Type.Object({
    object: Type.Literal('list'),
    data: Type.Array(item),
    has_more: Type.Boolean(),
    first_id: Type.String(),
    last_id: Type.String(),
  });
}

/** The envelope of a page: `last_id` is the `after` of the next page; both ids are empty on an empty page. */
export function toListPage<T extends { id: string }>(page: Page<T>): ListPage<T> {
  return {
    object: 'list',
    data: page.items,
    has_more: page.hasMore,
    first_id: page.items[0]?.id ?? '',
    last_id: page.items.at(-1)?.id ?? '',
  };
}
