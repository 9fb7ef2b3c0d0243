/** Sign in by pasting an API key; it is checked against /v1/preview/me and kept in sessionStorage only. */
import { h } from '../dom.ts';

export function renderSignIn(main: HTMLElement, signIn: (key: string) => Promise<void>): void {
  const input = h('input', {
    id: 'api-key',
    type: 'password',
    name: 'api-key',
    autocomplete: 'off',
    spellcheck: 'false',
    placeholder: 'sk-…',
    required: true,
    'aria-describedby': 'api-key-hint',
  });
  const error = h('p', { class: 'form-error', role: 'alert' });
  const button = h('button', { class: 'btn btn-primary', type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { class: 'signin-form' },
    h('label', { for: 'api-key' }, 'API key'),
    input,
    h(
      'p',
      { id: 'api-key-hint', class: 'hint' },
      'The key stays in this browser tab (sessionStorage) and is sent only to this server. ',
      'The first key is printed when the server starts on an empty database and is kept in ',
      h('code', 'data/bootstrap-api-key'),
      '.',
    ),
    error,
    button,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    button.disabled = true;
    error.textContent = '';
    try {
      await signIn(key);
    } catch (failure) {
      error.textContent = failure instanceof Error ? failure.message : String(failure);
      button.disabled = false;
      input.focus();
      input.select();
    }
  });
  main.append(
    h(
      'section',
      { class: 'signin card' },
      h('h1', 'Sign in'),
      h(
        'p',
        { class: 'lead' },
        'Models, reward curves, trajectories, training jobs and a chat playground for this server.',
      ),
      form,
    ),
  );
  input.focus();
}
