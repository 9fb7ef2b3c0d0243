/** GET /v1/preview/me: the entity a key acts as and every entity it may act for. */
import { type Static, Type } from '@sinclair/typebox';

export const IdentityResponse = Type.Object({ entity: Type.String(), entities: Type.Array(Type.String()) });
export type IdentityResponse = Static<typeof IdentityResponse>;
