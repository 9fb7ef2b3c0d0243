/** GET /v1/models and /v1/models/{id}: OpenAI's model objects, with vLLM's `root`/`parent` lineage. */
import { type Static, Type } from '@sinclair/typebox';

export const ModelCard = Type.Object({
  id: Type.String(),
  object: Type.Literal('model'),
  /** Unix seconds, as OpenAI answers. */
  created: Type.Integer(),
  owned_by: Type.String(),
  /** The base model the name runs on (vLLM: the served weights). */
  root: Type.String(),
  /** What it was made from: null for a base model, the base for a model's latest step, the model for `:stepN`. */
  parent: Type.Union([Type.String(), Type.Null()]),
  /** How tool calls are read from this model's answers (vLLM's `--tool-call-parser`): hermes, llama3_json, mistral. */
  tool_call_parser: Type.Union([Type.String(), Type.Null()]),
  /** Which engine kind samples this name (SAMPLER_ENGINE, SAMPLER_ENGINES): `ours` or `vllm`. */
  sampler_engine: Type.Union([Type.Literal('ours'), Type.Literal('vllm')]),
  /**
   * Which model code our engine runs this base with (its trainer, and its sampler where that is ours): `ours` (our own
   * implementation of the family) or `transformers` (transformers' modeling code with our cache and LoRA); null where
   * no engine has said.
   */
  implementation: Type.Union([Type.Literal('ours'), Type.Literal('transformers'), Type.Null()]),
});
export type ModelCard = Static<typeof ModelCard>;

export const ModelCardList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(ModelCard),
});
