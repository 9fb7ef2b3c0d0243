/**
 * A few DOM helpers: elements are built with `h()` and text always goes in as text nodes, never as HTML,
 * so nothing a trajectory or a model says can run as markup.
 */
export type Child = Node | string | number | null | undefined | false | Child[];
type Attrs = Record<string, unknown>;

/** Appends a child, text or (nested) list of them: a list of any length, never spread into arguments. */
export function append(parent: Node, child: Child): void {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) {
    for (const item of child) append(parent, item);
    return;
  }
  parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
}

function apply(element: Element, attrs: Attrs): void {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      element.addEventListener(key.slice(2).toLowerCase(), value as EventListener);
    } else if (key === 'class') {
      element.setAttribute('class', Array.isArray(value) ? value.filter(Boolean).join(' ') : String(value));
    } else if (key === 'value' && 'value' in element) {
      (element as HTMLInputElement).value = String(value);
    } else if (key === 'checked' && 'checked' in element) {
      (element as HTMLInputElement).checked = Boolean(value);
    } else {
      element.setAttribute(key, value === true ? '' : String(value));
    }
  }
}

function isAttrs(value: unknown): value is Attrs {
  return typeof value === 'object' && value !== null && !(value instanceof Node) && !Array.isArray(value);
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | Child,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (isAttrs(attrs)) apply(element, attrs);
  else append(element, attrs as Child);
  append(element, children);
  return element;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function s<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG_NS, tag);
  apply(element, attrs);
  append(element, children);
  return element;
}

export function clear(element: Element): void {
  while (element.firstChild) element.removeChild(element.firstChild);
}

export function replace(element: Element, ...children: Child[]): void {
  clear(element);
  append(element, children);
}

let idCounter = 0;
export const uid = (prefix: string) => {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
};

/** A labelled form field: the label is tied to the control, so clicking it and screen readers both work. */
export function field(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || uid('field');
  control.id = id;
  return h(
    'div',
    { class: 'field' },
    h('label', { for: id }, label),
    control,
    hint ? h('small', { class: 'hint' }, hint) : null,
  );
}

export function badge(status: string): HTMLElement {
  return h('span', { class: `badge badge-${status.toLowerCase()}` }, status.toLowerCase());
}

export function spinner(label = 'Loading…'): HTMLElement {
  return h('p', { class: 'loading', role: 'status' }, h('span', { class: 'spin', 'aria-hidden': 'true' }), label);
}

export function errorBox(error: unknown): HTMLElement {
  const message = error instanceof Error ? error.message : String(error);
  return h('div', { class: 'error-box', role: 'alert' }, message);
}

export function emptyState(title: string, ...body: Child[]): HTMLElement {
  return h('div', { class: 'empty' }, h('p', { class: 'empty-title' }, title), body);
}

/** A confirmation dialog (native <dialog>: focus is trapped, Escape cancels); resolves true on confirm. */
export function confirmDialog(options: {
  title: string;
  body: Child;
  confirm: string;
  danger?: boolean;
}): Promise<boolean> {
  return new Promise((resolve) => {
    const confirmButton = h(
      'button',
      { class: options.danger ? 'btn btn-danger' : 'btn btn-primary', value: 'confirm', type: 'submit' },
      options.confirm,
    );
    const cancelButton = h('button', { class: 'btn', value: 'cancel', type: 'submit', autofocus: true }, 'Cancel');
    const dialog = h(
      'dialog',
      { class: 'dialog', 'aria-labelledby': 'dialog-title' },
      h(
        'form',
        { method: 'dialog' },
        h('h2', { id: 'dialog-title' }, options.title),
        h('div', { class: 'dialog-body' }, options.body),
        h('div', { class: 'dialog-actions' }, cancelButton, confirmButton),
      ),
    );
    dialog.addEventListener('close', () => {
      resolve(dialog.returnValue === 'confirm');
      dialog.remove();
    });
    document.body.appendChild(dialog);
    dialog.showModal();
    cancelButton.focus();
  });
}

/** Shows a short message at the bottom of the screen (announced politely to screen readers). */
export function clearToasts(): void {
  document.getElementById('toasts')?.replaceChildren();
}

export function toast(message: string, kind: 'info' | 'error' = 'info'): void {
  let region = document.getElementById('toasts');
  if (!region) {
    region = h('div', { id: 'toasts', class: 'toasts', role: 'status', 'aria-live': 'polite' });
    document.body.appendChild(region);
  }
  const item = h('div', { class: `toast toast-${kind}` }, message);
  region.appendChild(item);
  setTimeout(() => item.remove(), 4000);
}
