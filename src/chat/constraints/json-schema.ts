/**
 * JSON Schema → the pattern of JSON texts that validate against it. Objects write their declared
 * properties in declaration order (required ones always, optional ones maybe), arrays honour
 * prefixItems/items/minItems/maxItems, strings length/pattern/format (intersected when combined),
 * numbers and integers exact ranges, plus enum, const, anyOf, oneOf (only with disjoint branches),
 * a one-schema allOf, and local `$ref`s, recursive ones unrolled to a bounded depth. Keywords that would
 * need more than a regular language, or that this compiler does not implement, are refused by name:
 * the output must validate, or the request fails.
 */
import { buildNfa } from './nfa.ts';
import { determinise } from './determinise.ts';
import { intersect } from './dfa.ts';
import { formatPattern } from './formats.ts';
import { anyJsonObject, anyJsonValue, ANY_CHAR, canonicalJson, escapeForJson, jsonArray, type JsonLayout, jsonObject, jsonString } from './json-text.ts';
import { ANY_NUMBER, type Bound, decimalRange, integerBound, integerRange } from './numbers.ts';
import { alt, isNothing, list, literal, NOTHING, optional, type Pattern, seq } from './pattern.ts';
import { ConstraintError, invalid, unsupported } from './constraint-error.ts';
import { searchPattern } from './regex.ts';
import { CONSTRAINT_LIMITS, tooLarge, type WorkBudget } from './limits.ts';

export interface SchemaOptions {
  layout: JsonLayout;
  /** `disable_additional_properties`: never write keys the schema does not name. */
  noAdditionalProperties: boolean;
  /** Nesting of objects and arrays wherever the schema allows any value. */
  anyValueDepth: number;
  /** How many times one `$ref` may enclose itself before the recursion is cut. */
  maxRecursion: number;
  /** Bound on the automata built for intersections and oneOf checks. */
  maxStates: number;
  /** The compilation's step budget, spent here too: `$ref`s and branches can multiply the work of a small schema. */
  budget: WorkBudget;
}

type Schema = Record<string, unknown>;

const TYPES = ['null', 'boolean', 'integer', 'number', 'string', 'array', 'object'] as const;
type TypeName = (typeof TYPES)[number];

/** Keywords that need what a regular language cannot say, or that this compiler does not implement. */
const REFUSED = [
  'not', 'if', 'then', 'else', 'dependentRequired', 'dependentSchemas', 'dependencies', 'patternProperties', 'propertyNames',
  'unevaluatedItems', 'contains', 'minContains', 'maxContains', 'multipleOf', '$dynamicRef', '$recursiveRef',
];

/** One subschema costs as much as many automaton steps: its patterns, and the NFA states they become. */
const SUBSCHEMA_STEPS = 200;

const isSchemaObject = (value: unknown): value is Schema => value !== null && typeof value === 'object' && !Array.isArray(value);

export function compileJsonSchema(root: unknown, options: SchemaOptions): Pattern {
  const compiler = new SchemaCompiler(root, options);
  const pattern = compiler.schema(root, '#');
  if (isNothing(pattern)) {
    if (compiler.cutRecursion) throw unsupported(`a recursive schema that needs more than ${options.maxRecursion} levels of nesting`);
    throw invalid('the schema matches no JSON value');
  }
  return pattern;
}

class SchemaCompiler {
  cutRecursion = false;
  private readonly refStack: string[] = [];
  private depth = 0;

  constructor(
    private readonly root: unknown,
    private readonly options: SchemaOptions,
  ) {}

  /** Counts the nesting (which `$ref`s can deepen past the schema's own) and the work of every subschema. */
  schema(schema: unknown, at: string): Pattern {
    if (this.depth >= CONSTRAINT_LIMITS.schemaDepth) throw tooLarge(`a JSON schema nested more than ${CONSTRAINT_LIMITS.schemaDepth} levels deep (at ${at})`);
    this.options.budget.spend(SUBSCHEMA_STEPS);
    this.depth += 1;
    try {
      return this.subschema(schema, at);
    } finally {
      this.depth -= 1;
    }
  }

  private subschema(schema: unknown, at: string): Pattern {
    if (schema === true) return anyJsonValue(this.options.layout, this.options.anyValueDepth);
    if (schema === false) return NOTHING;
    if (!isSchemaObject(schema)) throw invalid(`${at} is not a schema (an object or a boolean)`);
    for (const keyword of REFUSED) if (keyword in schema) throw unsupported(`the JSON schema keyword \`${keyword}\` (at ${at})`);
    if (schema.uniqueItems === true && !(typeof schema.maxItems === 'number' && schema.maxItems <= 1)) throw unsupported(`the JSON schema keyword \`uniqueItems\` (at ${at})`);
    if ('unevaluatedProperties' in schema && schema.unevaluatedProperties !== false) throw unsupported(`\`unevaluatedProperties\` other than false (at ${at})`);

    if (typeof schema.$ref === 'string') return this.reference(schema, at);
    if ('const' in schema) return literal(canonicalJson(schema.const));
    if ('enum' in schema) {
      if (!Array.isArray(schema.enum)) throw invalid(`${at}/enum must be an array`);
      return alt(...schema.enum.map((value) => literal(canonicalJson(value))));
    }
    const { anyOf, oneOf, allOf, ...rest } = schema;
    if (allOf !== undefined) {
      if (!Array.isArray(allOf) || allOf.length === 0) throw invalid(`${at}/allOf must be a non-empty array`);
      if (allOf.length > 1) throw unsupported(`\`allOf\` with more than one schema (at ${at})`);
      return this.schema(mergeSchemas({ ...rest, ...(anyOf === undefined ? {} : { anyOf }), ...(oneOf === undefined ? {} : { oneOf }) }, allOf[0], at), at);
    }
    if (anyOf !== undefined || oneOf !== undefined) {
      const branches = anyOf ?? oneOf;
      const keyword = anyOf !== undefined ? 'anyOf' : 'oneOf';
      if (anyOf !== undefined && oneOf !== undefined) throw unsupported(`\`anyOf\` together with \`oneOf\` (at ${at})`);
      if (!Array.isArray(branches) || branches.length === 0) throw invalid(`${at}/${keyword} must be a non-empty array`);
      // Keywords beside anyOf/oneOf apply to every branch.
      const patterns = branches.map((branch, index) => this.schema(mergeSchemas(rest, branch, `${at}/${keyword}/${index}`), `${at}/${keyword}/${index}`));
      if (keyword === 'oneOf') this.checkDisjoint(patterns, at);
      return alt(...patterns);
    }
    return alt(...this.types(schema, at).map((type) => this.typed(type, schema, at)));
  }

  private reference(schema: Schema, at: string): Pattern {
    const ref = schema.$ref as string;
    const constraining = Object.keys(schema).filter((key) => !ANNOTATIONS.has(key) && key !== '$ref');
    if (constraining.length > 0) throw unsupported(`keywords beside \`$ref\` (${constraining.join(', ')} at ${at})`);
    const depth = this.refStack.filter((seen) => seen === ref).length;
    if (depth >= this.options.maxRecursion) {
      this.cutRecursion = true;
      return NOTHING;
    }
    this.refStack.push(ref);
    try {
      return this.schema(this.resolve(ref, at), ref);
    } finally {
      this.refStack.pop();
    }
  }

  private resolve(ref: string, at: string): unknown {
    if (!ref.startsWith('#')) throw unsupported(`a \`$ref\` outside the schema (${ref} at ${at})`);
    if (ref !== '#' && !ref.startsWith('#/')) throw unsupported(`a \`$ref\` to an anchor (${ref} at ${at})`);
    let target: unknown = this.root;
    for (const raw of ref === '#' ? [] : ref.slice(2).split('/')) {
      const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
      if (!isSchemaObject(target) && !Array.isArray(target)) throw invalid(`$ref ${ref} (at ${at}) points nowhere`);
      target = (target as Record<string, unknown>)[key];
      if (target === undefined) throw invalid(`$ref ${ref} (at ${at}) points nowhere`);
    }
    return target;
  }

  private checkDisjoint(patterns: Pattern[], at: string): void {
    const dfas = patterns.map((pattern) => determinise(buildNfa(pattern, this.options.maxStates * 8, this.options.budget), this.options.maxStates, this.options.budget));
    for (let i = 0; i < dfas.length; i += 1) {
      for (let j = i + 1; j < dfas.length; j += 1) {
        const a = dfas[i];
        const b = dfas[j];
        if (a && b && intersect(a, b, this.options.maxStates, this.options.budget)) throw unsupported(`\`oneOf\` whose branches ${i} and ${j} can write the same JSON (at ${at}); use anyOf`);
      }
    }
  }

  private types(schema: Schema, at: string): TypeName[] {
    const type = schema.type;
    if (type === undefined) {
      if (['properties', 'required', 'additionalProperties', 'minProperties', 'maxProperties'].some((key) => key in schema)) return ['object'];
      if (['items', 'prefixItems', 'minItems', 'maxItems', 'additionalItems'].some((key) => key in schema)) return ['array'];
      if (['minLength', 'maxLength', 'pattern', 'format'].some((key) => key in schema)) return ['string'];
      if (['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'].some((key) => key in schema)) return ['number'];
      return [...TYPES].filter((name) => name !== 'integer'); // any JSON value
    }
    const names = Array.isArray(type) ? type : [type];
    for (const name of names) if (!TYPES.includes(name as TypeName)) throw invalid(`${at}/type: unknown type ${JSON.stringify(name)}`);
    return names as TypeName[];
  }

  private typed(type: TypeName, schema: Schema, at: string): Pattern {
    switch (type) {
      case 'null':
        return literal('null');
      case 'boolean':
        return alt(literal('true'), literal('false'));
      case 'integer':
        return this.integer(schema);
      case 'number':
        return this.number(schema);
      case 'string':
        return this.string(schema, at);
      case 'array':
        return this.array(schema, at);
      case 'object':
        return this.object(schema, at);
    }
  }

  private integer(schema: Schema): Pattern {
    let lo = integerBound(schema.minimum, 'minimum', true);
    let hi = integerBound(schema.maximum, 'maximum', false);
    // Draft 4 writes exclusivity as booleans beside minimum/maximum; later drafts as numbers.
    if (schema.exclusiveMinimum === true && lo !== null) lo += 1n;
    if (schema.exclusiveMaximum === true && hi !== null) hi -= 1n;
    if (typeof schema.exclusiveMinimum === 'number') {
      const bound = integerBound(schema.exclusiveMinimum, 'exclusiveMinimum', false)! + 1n;
      lo = lo === null || bound > lo ? bound : lo;
    }
    if (typeof schema.exclusiveMaximum === 'number') {
      const bound = integerBound(schema.exclusiveMaximum, 'exclusiveMaximum', true)! - 1n;
      hi = hi === null || bound < hi ? bound : hi;
    }
    return integerRange(lo, hi);
  }

  private number(schema: Schema): Pattern {
    const bound = (inclusive: unknown, exclusive: unknown, name: string, keepGreater: boolean): Bound | null => {
      const candidates: Bound[] = [];
      const value = integerBound(inclusive, name, null);
      if (value !== null) candidates.push({ value, exclusive: exclusive === true });
      if (typeof exclusive === 'number') candidates.push({ value: integerBound(exclusive, `exclusive${name[0].toUpperCase()}${name.slice(1)}`, null)!, exclusive: true });
      // The tighter bound wins; at a tie the exclusive one is tighter.
      return candidates.reduce<Bound | null>((best, next) => {
        if (best === null) return next;
        if (next.value === best.value) return next.exclusive ? next : best;
        return (next.value > best.value) === keepGreater ? next : best;
      }, null);
    };
    const lo = bound(schema.minimum, schema.exclusiveMinimum, 'minimum', true);
    const hi = bound(schema.maximum, schema.exclusiveMaximum, 'maximum', false);
    return lo === null && hi === null ? ANY_NUMBER : decimalRange(lo, hi);
  }

  private string(schema: Schema, at: string): Pattern {
    const minLength = nonNegativeInteger(schema.minLength, `${at}/minLength`) ?? 0;
    const maxLength = nonNegativeInteger(schema.maxLength, `${at}/maxLength`);
    const shapes: Pattern[] = [];
    if (typeof schema.format === 'string') shapes.push(seq(literal('"'), escapeForJson(formatPattern(schema.format)), literal('"')));
    if (schema.pattern !== undefined) {
      if (typeof schema.pattern !== 'string') throw invalid(`${at}/pattern must be a string`);
      let decoded: Pattern;
      try {
        decoded = searchPattern(schema.pattern, ANY_CHAR);
      } catch (error) {
        if (error instanceof ConstraintError) throw new ConstraintError(error.reason, `${error.message} (pattern at ${at})`);
        throw error;
      }
      shapes.push(seq(literal('"'), escapeForJson(decoded), literal('"')));
    }
    const lengths = jsonString(minLength, maxLength);
    if (shapes.length === 0) return lengths;
    if (minLength > 0 || maxLength !== null) shapes.push(lengths);
    if (shapes.length === 1) return shapes[0];
    return this.intersection(shapes, at);
  }

  /** Strings that every shape allows, as one embedded automaton. */
  private intersection(shapes: Pattern[], at: string): Pattern {
    const { maxStates, budget } = this.options;
    let result = determinise(buildNfa(shapes[0], maxStates * 8, budget), maxStates, budget);
    for (const shape of shapes.slice(1)) {
      const next = determinise(buildNfa(shape, maxStates * 8, budget), maxStates, budget);
      result = result && next ? intersect(result, next, maxStates, budget) : null;
    }
    if (!result) throw invalid(`${at}: no string satisfies its length, pattern and format together`);
    return { kind: 'dfa', dfa: result };
  }

  private array(schema: Schema, at: string): Pattern {
    const { layout } = this.options;
    const minItems = nonNegativeInteger(schema.minItems, `${at}/minItems`) ?? 0;
    const maxItems = nonNegativeInteger(schema.maxItems, `${at}/maxItems`);
    // Draft 2020-12: prefixItems + items; drafts 4–2019: items as an array + additionalItems.
    const tuple = Array.isArray(schema.prefixItems) ? schema.prefixItems : Array.isArray(schema.items) ? schema.items : [];
    const restSchema = Array.isArray(schema.items) ? (schema.additionalItems ?? true) : (schema.items ?? true);
    const written = Math.min(tuple.length, maxItems ?? tuple.length);
    const prefix = tuple.slice(0, written).map((item, index) => this.schema(item, `${at}/prefixItems/${index}`));
    const restMin = Math.max(0, minItems - written);
    const restMax = maxItems === null ? null : maxItems - written;
    // When maxItems cuts the tuple short, nothing may follow it.
    const rest = written === tuple.length && restMax !== 0 ? this.schema(restSchema, `${at}/items`) : NOTHING;
    const { itemSeparator } = layout;
    if (prefix.length === 0) return jsonArray(layout, list(rest, itemSeparator, restMin, restMax));
    const tail = restMin > 0 ? seq(itemSeparator, list(rest, itemSeparator, restMin, restMax)) : optional(seq(itemSeparator, list(rest, itemSeparator, 1, restMax)));
    return jsonArray(layout, seq(...prefix.flatMap((item, index) => (index === 0 ? [item] : [itemSeparator, item])), tail));
  }

  private object(schema: Schema, at: string): Pattern {
    const { layout } = this.options;
    const properties = schema.properties === undefined ? {} : schema.properties;
    if (!isSchemaObject(properties)) throw invalid(`${at}/properties must be an object`);
    const required = schema.required === undefined ? [] : schema.required;
    if (!Array.isArray(required) || required.some((name) => typeof name !== 'string')) throw invalid(`${at}/required must be an array of strings`);
    const additional = schema.additionalProperties ?? true;
    const names = Object.keys(properties);
    // A required name the properties do not declare is written last, with the additionalProperties schema.
    const undeclared = (required as string[]).filter((name) => !(name in properties));
    if (undeclared.length > 0 && additional === false) throw invalid(`${at}: required properties ${undeclared.join(', ')} are neither declared nor allowed by additionalProperties`);
    const members = [
      ...names.map((name) => ({ name, schema: properties[name], required: required.includes(name) })),
      ...undeclared.map((name) => ({ name, schema: additional, required: true })),
    ].map(({ name, schema: value, required: isRequired }) => ({
      pattern: seq(literal(JSON.stringify(name)), layout.keySeparator, this.schema(value, `${at}/properties/${name}`)),
      required: isRequired,
    }));
    // A required member that nothing can satisfy (e.g. recursion cut at its bound) empties the object.
    if (members.some((member) => member.required && isNothing(member.pattern))) return NOTHING;
    const written = members.filter((member) => !isNothing(member.pattern));
    const minProperties = nonNegativeInteger(schema.minProperties, `${at}/minProperties`);
    const maxProperties = nonNegativeInteger(schema.maxProperties, `${at}/maxProperties`);
    const requiredCount = written.filter((member) => member.required).length;
    if ((minProperties !== null && minProperties > requiredCount && names.length > 0) || (maxProperties !== null && maxProperties < written.length)) {
      throw unsupported(`\`minProperties\`/\`maxProperties\` beyond what the required and declared properties settle (at ${at})`);
    }
    // Free keys only where the schema names none: declared keys and free ones would have to differ,
    // which a regular pattern can say only at a high price.
    if (names.length === 0 && undeclared.length === 0 && additional !== false && !this.options.noAdditionalProperties) {
      const value = additional === true ? anyJsonValue(layout, this.options.anyValueDepth - 1) : this.schema(additional, `${at}/additionalProperties`);
      const min = minProperties ?? 0;
      const member = seq(jsonString(), layout.keySeparator, value);
      if (min > 0 || maxProperties !== null) return jsonObject(layout, list(member, layout.itemSeparator, min, maxProperties));
      return anyJsonObject(layout, this.options.anyValueDepth, value);
    }
    return jsonObject(layout, { kind: 'members', members: written, separator: layout.itemSeparator });
  }
}

const ANNOTATIONS = new Set([
  'title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'deprecated', 'readOnly', 'writeOnly', '$defs',
  'definitions', '$anchor', 'contentMediaType', 'contentEncoding', 'discriminator', 'nullable', 'strict',
]);

function nonNegativeInteger(value: unknown, at: string): number | null {
  if (value === undefined) return null;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) throw invalid(`${at} must be a non-negative integer`);
  return value;
}

/** A branch seen with its parent's keywords: the branch's own win, as the more specific. */
function mergeSchemas(parent: Schema, branch: unknown, at: string): unknown {
  if (typeof branch === 'boolean') return Object.keys(parent).length === 0 ? branch : branch ? parent : false;
  if (!isSchemaObject(branch)) throw invalid(`${at} is not a schema (an object or a boolean)`);
  if (Object.keys(parent).every((key) => ANNOTATIONS.has(key))) return branch;
  if (typeof branch.$ref === 'string') throw unsupported(`a \`$ref\` inside anyOf/oneOf/allOf with sibling keywords (at ${at})`);
  return { ...parent, ...branch };
}

