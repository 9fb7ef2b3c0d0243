/**
 * Every number that decides what the tiny chat model looks like. Changing anything here (or any
 * file in this folder) changes the recipe hash, so `make-tiny.ts` rebuilds the folder.
 */

/** Added tokens, in id order after the BPE vocabulary. Ids are fixed so the vocab is exactly `VOCAB_SIZE`. */
export const ADDED_TOKENS = [
  // Control tokens: never part of visible text, dropped by skip_special_tokens.
  { content: '<|endoftext|>', special: true },
  { content: '<|im_start|>', special: true },
  { content: '<|im_end|>', special: true },
  // Markup tokens: single ids but not "special", as in Qwen, so they survive skip_special_tokens
  // and the tool-call and reasoning parsers still see them in decoded text.
  { content: '<tool_call>', special: false },
  { content: '</tool_call>', special: false },
  { content: '<tool_response>', special: false },
  { content: '</tool_response>', special: false },
  { content: '<think>', special: false },
  { content: '</think>', special: false },
] as const;

export const VOCAB_SIZE = 2048;
const BYTE_TOKENS = 256;
/** Merges fill the vocabulary exactly: bytes + merges + added tokens = VOCAB_SIZE. */
export const BPE_MERGES = VOCAB_SIZE - BYTE_TOKENS - ADDED_TOKENS.length;

export const CONTEXT_LENGTH = 2048;

/** Llama layout (GQA, RoPE, RMSNorm, SwiGLU, tied embeddings). */
export const ARCHITECTURE = {
  hidden_size: 192,
  intermediate_size: 512,
  num_hidden_layers: 4,
  num_attention_heads: 6,
  num_key_value_heads: 2,
  head_dim: 32,
  rms_norm_eps: 1e-6,
  rope_theta: 10000.0,
  initializer_range: 0.02,
} as const;

export const WEIGHTS_SEED = 20250101;
export const CORPUS_SEED = 7;
/** Synthetic documents generated on top of the hand-written corpus. */
export const SYNTHETIC_DOCUMENTS = 4000;
/** Pretraining conversations, rendered, that the BPE merges are also learned from. */
export const BPE_CHAT_DOCUMENTS = 3000;

/**
 * How the weights are pretrained (models/recipe/pretraining.ts → engine/pretrain.py): synthetic chat
 * conversations, loss on the assistant turns only, full-weight AdamW with warmup and cosine decay.
 */
export const PRETRAINING = {
  seed: 11,
  conversations: 40000,
  arithmetic: { maxOperand: 20, maxFactor: 9 },
  /** Relative shares of the conversation kinds. */
  mix: { arithmetic: 5, copy: 1.5, reverse: 1, chat: 1, tool: 1.5 },
  steps: 2400,
  learningRate: 3e-3,
  warmupSteps: 50,
  batchTokens: 2048,
  rowTokens: [128, 512],
  evalSeed: 1234,
  evalArithmetic: 50,
  evalMaxTokens: 48,
  evalSamples: 4,
  /** Half the bytes of fp32, so the weights can be committed; the engine computes in fp32 on CPU. */
  saveDtype: 'f16',
} as const;
