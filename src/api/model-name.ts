/**
 * The name a trained model is served under (decisions.md): `entity/project/name`, optionally as ART's W&B artifact
 * URI (`wandb-artifact:///entity/project/name`), optionally tagged `:stepN` (that checkpoint) or `:latest` (the
 * same as no tag: the latest checkpoint). The one place that grammar is parsed or written; a base model is served
 * under its own id, which is not this grammar's business.
 */

/** A served model name, in parts. */
export interface ServedModelName {
  entity: string;
  project: string;
  name: string;
  /** The checkpoint's step for `:stepN`, 'latest' for `:latest`, null without a tag (both mean the latest). */
  step?: number | 'latest' | null;
  /** Written as a W&B artifact URI (`wandb-artifact:///…`), as ART's `get_inference_name` does. */
  artifact?: boolean;
}

const ARTIFACT_SCHEME = 'wandb-artifact:///';
const PATTERN = /^(wandb-artifact:\/\/\/)?([^/:]+)\/([^/:]+)\/([^/:]+)(?::(?:step(\d+)|(latest)))?$/;

/** The parts of a served model name; null when `text` is not one. */
export function parseServedModelName(text: string): ServedModelName | null {
  const match = PATTERN.exec(text);
  if (!match) return null;
  const [, scheme, entity, project, name, step, latest] = match;
  return {
    entity,
    project,
    name,
    step: step !== undefined ? Number(step) : latest ? 'latest' : null,
    artifact: scheme !== undefined,
  };
}

/** The name chat completions serve these parts under. */
export function servedModelName({ entity, project, name, step = null, artifact = false }: ServedModelName): string {
  const tag = step === null ? '' : step === 'latest' ? ':latest' : `:step${step}`;
  return `${artifact ? ARTIFACT_SCHEME : ''}${entity}/${project}/${name}${tag}`;
}
