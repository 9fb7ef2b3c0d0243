/**
 * The names the server gives adapters in an engine (the `adapter` field of every op), in one namespace per owner
 * so they never collide: a published checkpoint as samplers serve it, the adapter an RL or SFT job trains, and a
 * Tinker training client's. Nothing else builds these strings; the engine treats them as opaque keys.
 */

/** A servable checkpoint's adapter: the trainer publishes under it, chat and Tinker sampling ask for it. */
export const servingAdapterKey = (checkpointId: string): string => `ckpt:${checkpointId}`;

/** The adapter a training job of this model trains on the trainer, step after step. */
export const jobAdapterKey = (modelId: string): string => `train:${modelId}`;

/** The adapter of a Tinker training client of this model on the trainer. */
export const tinkerAdapterKey = (modelId: string): string => `tinker:${modelId}`;
