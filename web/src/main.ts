/**
 * The dashboard's entry: the top bar, sign-in state and the routes. Pages live in ./pages.
 */
import './styles.css';
import { apiKey, handleUnauthorized, type Me, request, setApiKey } from './api.ts';
import { clearToasts, errorBox, h, replace } from './dom.ts';
import { renderEngines } from './pages/engines.ts';
import { renderGroups } from './pages/groups.ts';
import { renderJob } from './pages/job.ts';
import { renderJobs } from './pages/jobs.ts';
import { renderModel } from './pages/model.ts';
import { renderModels } from './pages/models.ts';
import { renderPlayground } from './pages/playground.ts';
import { renderSignIn } from './pages/signin.ts';
import { renderTrajectories } from './pages/trajectories.ts';
import { currentHash, navigate, renderRoute, route } from './router.ts';

const ENTITY_STORAGE = 'agent-trainer.entity';

route('/', 'models', renderModels);
route('/models', 'models', renderModels);
route('/models/:id', 'models', renderModel);
route('/models/:id/trajectories', 'models', renderTrajectories);
route('/models/:id/groups', 'models', renderGroups);
route('/jobs', 'jobs', renderJobs);
route('/jobs/:id', 'jobs', renderJob);
route('/playground', 'playground', renderPlayground);
route('/engines', 'engines', renderEngines);

const main = document.getElementById('content') as HTMLElement;
const nav = document.getElementById('nav') as HTMLElement;
const account = document.getElementById('account') as HTMLElement;

function renderAccount(): void {
  const key = apiKey();
  if (!key) {
    replace(account);
    nav.hidden = true;
    return;
  }
  nav.hidden = false;
  const entity = h(
    'span',
    { class: 'entity', title: 'The entity this API key acts as' },
    sessionStorage.getItem(ENTITY_STORAGE) ?? '',
  );
  if (!entity.textContent) {
    request<Me>('GET', '/v1/preview/me')
      .then((me) => {
        sessionStorage.setItem(ENTITY_STORAGE, me.entity);
        entity.textContent = me.entity;
      })
      .catch(() => {});
  }
  replace(account, entity, h('button', { class: 'btn btn-ghost', type: 'button', onclick: signOut }, 'Sign out'));
}

function signOut(): void {
  setApiKey(null);
  sessionStorage.removeItem(ENTITY_STORAGE);
  renderAccount();
  void show();
}

function markNav(active: string): void {
  for (const link of nav.querySelectorAll('a')) {
    if (link.dataset.nav === active) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
}

async function show(): Promise<void> {
  if (!apiKey()) {
    markNav('');
    document.title = 'Sign in · agent-trainer';
    main.replaceChildren();
    renderSignIn(main, async (key) => {
      const me = await request<Me>('GET', '/v1/preview/me', undefined, { key });
      setApiKey(key);
      sessionStorage.setItem(ENTITY_STORAGE, me.entity);
      renderAccount();
      await show();
    });
    return;
  }
  try {
    await renderRoute(main, markNav, ({ main: target }) => {
      document.title = 'Not found · agent-trainer';
      target.append(
        h('h1', 'Page not found'),
        h('p', 'Nothing lives at ', h('code', currentHash().path), '. ', h('a', { href: '#/' }, 'Back to models')),
      );
    });
  } catch (error) {
    main.append(errorBox(error));
  }
  // Move focus to the page's heading, so keyboard and screen-reader users start at the new content.
  const heading = main.querySelector('h1');
  if (heading && document.activeElement === document.body) {
    heading.setAttribute('tabindex', '-1');
    heading.focus({ preventScroll: true });
  }
}

handleUnauthorized(() => {
  setApiKey(null);
  renderAccount();
  void show();
});

window.addEventListener('hashchange', () => {
  clearToasts();
  void show();
});
renderAccount();
if (!location.hash) navigate('/');
else void show();
