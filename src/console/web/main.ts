/**
 * The console's page (docs/cli.md, "The console"): a list of tasks newest first with counts per status, filters, search
 * and pages; one task in full with its timeline, inputs and actions; both kept live by server-sent events
 * (src/console/liveView.ts), with pause and refresh. Keyboard: `/` search, `r` refresh, `p` pause, Escape back to the
 * list.
 */
import htm from 'htm';
import { h, render } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

import type { ConsoleDetail, ConsoleInput, ConsoleList, ConsoleStatus, SourceKind } from '../view.js';
import { AnswerForm } from './answerForm.js';
import type { Config, Filters, Route } from './api.js';
import { detailHref, filterParams, formatAge, formatTime, getJson, listHref, parseRoute, postAction } from './api.js';

const html = htm.bind(h);

const OPEN: readonly ConsoleStatus[] = ['working', 'input_required'];

function Badge({ status }: { status: ConsoleStatus }) {
  return html`<span class=${`badge s-${status}`}>${status}</span>`;
}

/** Re-renders every second, so ages move on between updates. */
function useClock(): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1_000);
    return () => clearInterval(timer);
  }, []);
  return now;
}

function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash));
  useEffect(() => {
    const onHash = () => setRoute(parseRoute(location.hash));
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);
  return route;
}

interface Live<T> {
  value: T | undefined;
  /** When it arrived (this page's clock), to move the source's `now` on. */
  receivedAt: number;
}

/**
 * The list and the detail of the view, from the server's event stream while live, or from one read on refresh.
 * `connection` says which: live, paused, or reconnecting.
 */
function useView(
  source: SourceKind,
  filters: Filters,
  cursor: string | undefined,
  id: string | undefined,
  paused: boolean,
) {
  const [list, setList] = useState<Live<ConsoleList>>({ value: undefined, receivedAt: 0 });
  const [detail, setDetail] = useState<Live<ConsoleDetail | null>>({ value: undefined, receivedAt: 0 });
  const [problem, setProblem] = useState<string | undefined>();
  const [connection, setConnection] = useState<'live' | 'paused' | 'reconnecting'>('reconnecting');
  const params = filterParams(filters, cursor);
  const key = `${source}?${params}#${id ?? ''}`;
  const refresh = useCallback(async () => {
    try {
      if (id === undefined) {
        setList({ value: await getJson<ConsoleList>(`api/${source}/tasks?${params}`), receivedAt: Date.now() });
      } else {
        const shown = await getJson<ConsoleDetail>(`api/${source}/tasks/${encodeURIComponent(id)}`).catch(
          (error: Error) => {
            if (/^no /.test(error.message)) return null;
            throw error;
          },
        );
        setDetail({ value: shown, receivedAt: Date.now() });
      }
      setProblem(undefined);
    } catch (error) {
      setProblem((error as Error).message);
    }
  }, [key]);
  useEffect(() => {
    if (paused) {
      setConnection('paused');
      return;
    }
    const stream = new URLSearchParams(params);
    stream.set('source', source);
    if (id !== undefined) {
      stream.set('detail', id);
      stream.set('list', '0');
    }
    const events = new EventSource(`api/events?${stream}`);
    events.addEventListener('open', () => setConnection('live'));
    events.addEventListener('error', () => setConnection('reconnecting'));
    events.addEventListener('list', (e) => {
      setList({ value: JSON.parse((e as MessageEvent<string>).data) as ConsoleList, receivedAt: Date.now() });
      setProblem(undefined);
    });
    events.addEventListener('detail', (e) => {
      setDetail({
        value: JSON.parse((e as MessageEvent<string>).data) as ConsoleDetail | null,
        receivedAt: Date.now(),
      });
      setProblem(undefined);
    });
    events.addEventListener('problem', (e) =>
      setProblem((JSON.parse((e as MessageEvent<string>).data) as { error: string }).error),
    );
    return () => events.close();
  }, [key, paused]);
  return { list, detail, problem, connection, refresh };
}

function App() {
  const route = useRoute();
  const [config, setConfig] = useState<Config | undefined>();
  const [failed, setFailed] = useState<string | undefined>();
  const [paused, setPaused] = useState(false);
  useEffect(() => {
    getJson<Config>('api/config').then(setConfig, (error: Error) => setFailed(error.message));
  }, []);
  if (failed) return html`<main><p class="notice error" role="alert">${failed}</p></main>`;
  if (!config) return html`<p class="loading">Loading the console…</p>`;
  const source = config.sources.find((s) => s.kind === route.source) ?? config.sources[0]!;
  return html`<${Console}
    key=${source.kind}
    config=${config}
    source=${source}
    route=${route}
    paused=${paused}
    setPaused=${setPaused}
  />`;
}

interface ConsoleProps {
  config: Config;
  source: Config['sources'][number];
  route: Route;
  paused: boolean;
  setPaused: (paused: boolean) => void;
}

function Console({ config, source, route, paused, setPaused }: ConsoleProps) {
  const filters = route.filters;
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors.at(-1);
  const view = useView(source.kind, filters, cursor, route.id, paused);
  const filterKey = filterParams(filters).toString();
  useEffect(() => setCursors([]), [filterKey]);
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const typing = /^(INPUT|SELECT|TEXTAREA)$/.test((e.target as HTMLElement).tagName);
      if (e.key === 'Escape' && route.id !== undefined) location.hash = listHref(source.kind, filters);
      if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
      if (e.key === '/') {
        e.preventDefault();
        document.getElementById('search')?.focus();
      } else if (e.key === 'r') void view.refresh();
      else if (e.key === 'p') setPaused(!paused);
    };
    addEventListener('keydown', onKey);
    return () => removeEventListener('keydown', onKey);
  });
  const connection = view.connection === 'live' ? 'live' : view.connection === 'paused' ? 'paused' : 'connecting…';
  return html`
    <header class="bar">
      <h1>Closeout console</h1>
      ${
        config.sources.length > 1
          ? html`<nav class="sources" aria-label="Sources">
              ${config.sources.map(
                (s) =>
                  html`<a
                    href=${listHref(s.kind, { status: [], tool: '', search: '' })}
                    aria-current=${s.kind === source.kind ? 'page' : undefined}
                    >${s.kind === 'ledger' ? 'Client ledger' : 'Server store'}</a
                  >`,
              )}
            </nav>`
          : null
      }
      <span class="where">${source.kind === 'ledger' ? 'ledger' : 'store'} ${source.shown}</span>
      <div class="live">
        <span class=${`state ${view.connection === 'live' ? 'on' : ''}`} role="status" aria-live="polite"
          >${connection}</span
        >
        <button type="button" aria-pressed=${paused} onClick=${() => setPaused(!paused)} title="p">
          ${paused ? 'Resume' : 'Pause'}
        </button>
        <button type="button" onClick=${() => void view.refresh()} title="r">Refresh</button>
      </div>
    </header>
    <main>
      ${view.problem ? html`<p class="notice error" role="alert">${view.problem}</p>` : null}
      ${
        route.id === undefined
          ? html`<${TaskList}
              source=${source}
              filters=${filters}
              live=${view.list}
              cursors=${cursors}
              setCursors=${setCursors}
            />`
          : html`<${TaskDetail}
              source=${source}
              id=${route.id}
              filters=${filters}
              live=${view.detail}
              traceLink=${config.traceLink}
              refresh=${view.refresh}
            />`
      }
    </main>
  `;
}

interface TaskListProps {
  source: Config['sources'][number];
  filters: Filters;
  live: Live<ConsoleList>;
  cursors: string[];
  setCursors: (cursors: string[]) => void;
}

function TaskList({ source, filters, live, cursors, setCursors }: TaskListProps) {
  const now = useClock();
  const [tool, setTool] = useState(filters.tool);
  const [search, setSearch] = useState(filters.search);
  const [confirming, setConfirming] = useState(false);
  const [notice, setNotice] = useState<{ error: boolean; text: string } | undefined>();
  useEffect(() => {
    setTool(filters.tool);
    setSearch(filters.search);
  }, [filters.tool, filters.search]);
  const go = (next: Partial<Filters>) => {
    location.hash = listHref(source.kind, { ...filters, ...next });
  };
  const list = live.value;
  const sourceNow = list ? list.now + (now - live.receivedAt) : now;
  const openCount = list
    ? OPEN.reduce(
        (sum, s) => sum + (filters.status.length === 0 || filters.status.includes(s) ? (list.counts[s] ?? 0) : 0),
        0,
      )
    : 0;
  const total = list ? source.statuses.reduce((sum, s) => sum + (list.counts[s] ?? 0), 0) : 0;
  const toggle = (status: ConsoleStatus) =>
    go({
      status: filters.status.includes(status)
        ? filters.status.filter((s) => s !== status)
        : [...filters.status, status],
    });
  const bulkCancel = async () => {
    setConfirming(false);
    try {
      const done = await postAction(`api/${source.kind}/cancel`, {
        status: filters.status,
        tool: filters.tool,
        search: filters.search,
      });
      setNotice({ error: !done.ok, text: done.message });
    } catch (error) {
      setNotice({ error: true, text: (error as Error).message });
    }
  };
  return html`
    <div class="counts" role="group" aria-label="Filter by status">
      <button type="button" aria-pressed=${filters.status.length === 0} onClick=${() => go({ status: [] })}>
        all ${list ? total : ''}
      </button>
      ${source.statuses.map(
        (status) =>
          html`<button
            type="button"
            class=${`badge s-${status}`}
            aria-pressed=${filters.status.includes(status)}
            onClick=${() => toggle(status)}
          >
            ${status} ${list ? (list.counts[status] ?? 0) : ''}
          </button>`,
      )}
    </div>
    <form
      class="filters"
      role="search"
      onSubmit=${(e: Event) => {
        e.preventDefault();
        go({ tool, search });
      }}
    >
      <label
        >Tool<input
          id="tool"
          value=${tool}
          placeholder="any tool"
          onInput=${(e: Event) => setTool((e.target as HTMLInputElement).value)}
      /></label>
      <label
        >Search<input
          id="search"
          type="search"
          value=${search}
          placeholder=${source.kind === 'ledger' ? 'task id (prefix), record id, correlation id, idempotency key' : 'task id (prefix), idempotency key'}
          onInput=${(e: Event) => setSearch((e.target as HTMLInputElement).value)}
      /></label>
      <button type="submit" class="primary">Apply</button>
      ${
        filters.tool || filters.search || filters.status.length > 0
          ? html`<button type="button" onClick=${() => go({ status: [], tool: '', search: '' })}>Clear</button>`
          : null
      }
      ${
        openCount > 0
          ? html`<button type="button" class="danger" onClick=${() => setConfirming(true)}>
              Cancel ${openCount} open…
            </button>`
          : null
      }
    </form>
    ${
      confirming
        ? html`<div class="confirmbar" role="alertdialog" aria-label="Confirm bulk cancel">
            <span>Cancel every open task these filters select (${openCount})? Cancellation is cooperative.</span>
            <button type="button" class="danger confirm" autofocus onClick=${bulkCancel}>Yes, cancel them</button>
            <button type="button" onClick=${() => setConfirming(false)}>No</button>
          </div>`
        : null
    }
    ${notice ? html`<p class=${`notice ${notice.error ? 'error' : ''}`} role="status">${notice.text}</p>` : null}
    ${
      !list
        ? html`<p class="loading">Loading…</p>`
        : list.rows.length === 0
          ? html`<p class="empty">
              No tasks${filters.status.length || filters.tool || filters.search ? ' match these filters' : ''}.
            </p>`
          : html`<table class="tasks">
              <caption class="visually-hidden">
                Tasks, newest first
              </caption>
              <thead>
                <tr>
                  <th scope="col">Status</th>
                  <th scope="col">Task</th>
                  <th scope="col">Tool</th>
                  <th scope="col">Message</th>
                  <th scope="col">Age</th>
                </tr>
              </thead>
              <tbody>
                ${list.rows.map(
                  (row) =>
                    html`<tr key=${row.id} data-id=${row.id} data-status=${row.status}>
                      <td>
                        <${Badge}
                          status=${row.status}
                        />${row.cancelRequested && OPEN.includes(row.status) ? html` <span class="hint">cancel requested</span>` : null}
                      </td>
                      <td class="id">
                        <a href=${detailHref(source.kind, row.id)} title=${row.taskId ?? row.id}
                          >${(row.taskId ?? row.id).slice(0, 18)}${(row.taskId ?? row.id).length > 18 ? '…' : ''}</a
                        >
                        ${row.correlationId ? html`<div class="hint">${row.correlationId}</div>` : null}
                        ${row.principal ? html`<div class="hint">${row.principal}</div>` : null}
                      </td>
                      <td>${row.toolName}</td>
                      <td class="message">${row.statusMessage ?? ''}</td>
                      <td class="age">
                        <time datetime=${new Date(row.at).toISOString()} title=${formatTime(row.at)}
                          >${formatAge(sourceNow - row.at)}</time
                        >
                      </td>
                    </tr>`,
                )}
              </tbody>
            </table>`
    }
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled=${cursors.length === 0} onClick=${() => setCursors([])}>Newest</button>
      <button type="button" disabled=${cursors.length === 0} onClick=${() => setCursors(cursors.slice(0, -1))}>
        Newer
      </button>
      <button
        type="button"
        disabled=${!list?.nextCursor}
        onClick=${() => list?.nextCursor && setCursors([...cursors, list.nextCursor])}
      >
        Older
      </button>
      <span class="hint">page ${cursors.length + 1}</span>
    </nav>
  `;
}

interface TaskDetailProps {
  source: Config['sources'][number];
  id: string;
  filters: Filters;
  live: Live<ConsoleDetail | null>;
  traceLink: string | null;
  refresh: () => Promise<void>;
}

type Action = 'cancel' | 'resubmit' | 'follow';

const ACTION_WORDS: Record<Action, { button: string; ask: string; yes: string }> = {
  follow: {
    button: 'Follow here',
    ask: 'Follow this task from the console until it closes out (its inputs then show here)?',
    yes: 'Yes, follow it',
  },
  cancel: {
    button: 'Cancel task…',
    ask: 'Ask the server to cancel this task? Cancellation is cooperative: it may still complete.',
    yes: 'Yes, cancel it',
  },
  resubmit: {
    button: 'Resubmit…',
    ask: 'Submit this call again, with the same tool and arguments?',
    yes: 'Yes, resubmit',
  },
};

function TaskDetail({ source, id, filters, live, traceLink, refresh }: TaskDetailProps) {
  const now = useClock();
  const [confirming, setConfirming] = useState<Action | undefined>();
  const [notice, setNotice] = useState<{ error: boolean; text: string } | undefined>();
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), [id]);
  const detail = live.value;
  const back = html`<a href=${listHref(source.kind, filters)}>← All tasks</a>`;
  if (detail === undefined)
    return html`${back}
      <p class="loading">Loading…</p>`;
  if (detail === null)
    return html`${back}
      <p class="notice error" role="alert">No task ${id} in this ${source.kind}.</p>`;
  const sourceNow = detail.now + (now - live.receivedAt);
  const act = async (action: Action) => {
    setConfirming(undefined);
    setNotice({ error: false, text: `${action}…` });
    try {
      const done = await postAction(`api/${source.kind}/tasks/${encodeURIComponent(id)}/${action}`);
      setNotice({ error: !done.ok, text: done.message });
      if (done.id && done.id !== id) location.hash = detailHref(source.kind, done.id);
      await refresh();
    } catch (error) {
      setNotice({ error: true, text: (error as Error).message });
    }
  };
  const answer = (input: ConsoleInput) => async (response: unknown) => {
    try {
      const done = await postAction(`api/${source.kind}/tasks/${encodeURIComponent(id)}/answer`, {
        key: input.key,
        response,
      });
      setNotice({ error: !done.ok, text: done.message });
      await refresh();
    } catch (error) {
      setNotice({ error: true, text: (error as Error).message });
    }
  };
  const actions = (['follow', 'cancel', 'resubmit'] as const).filter((a) => detail.actions[a]);
  const trace =
    detail.traceId && traceLink
      ? html`<a href=${traceLink.replace('{traceId}', encodeURIComponent(detail.traceId))} rel="noreferrer"
          >${detail.traceId}</a
        >`
      : detail.traceId;
  return html`<article class="detail">
    ${back}
    <h2 tabindex="-1" ref=${heading}>
      <${Badge} status=${detail.status} /> ${detail.toolName}
      <span class="hint"> ${detail.taskId ? `task ${detail.taskId}` : `record ${detail.id}`}</span>
    </h2>
    ${detail.statusMessage ? html`<p>${detail.statusMessage}</p>` : null}
    ${
      actions.length > 0
        ? html`<div class="actions">
            ${actions.map(
              (a) =>
                html`<button type="button" class=${a === 'cancel' ? 'danger' : ''} onClick=${() => setConfirming(a)}>
                  ${ACTION_WORDS[a].button}
                </button>`,
            )}
          </div>`
        : null
    }
    ${
      confirming
        ? html`<div class="confirmbar" role="alertdialog" aria-label="Confirm">
            <span>${ACTION_WORDS[confirming].ask}</span>
            <button type="button" class="danger confirm" autofocus onClick=${() => void act(confirming)}>
              ${ACTION_WORDS[confirming].yes}
            </button>
            <button type="button" onClick=${() => setConfirming(undefined)}>No</button>
          </div>`
        : null
    }
    ${notice ? html`<p class=${`notice ${notice.error ? 'error' : ''}`} role="status">${notice.text}</p>` : null}
    ${
      detail.inputs.length > 0
        ? html`<section aria-label="Input requests">
            <h3>Input requests</h3>
            ${detail.inputs.map(
              (input) =>
                html`<div class="input" data-key=${input.key}>
                  <div><strong>${input.key}</strong> <span class="hint">${input.method}</span></div>
                  ${input.message ? html`<div class="asks">${input.message}</div>` : null}
                  <div class="hint">
                    ${input.askedAt ? `asked ${formatTime(input.askedAt)}` : ''}
                    ${input.answeredAt ? ` · answered ${formatTime(input.answeredAt)}` : ''}
                    ${input.sentAt ? ` · sent ${formatTime(input.sentAt)}` : input.answeredAt && source.kind === 'ledger' ? ' · not sent yet' : ''}
                  </div>
                  ${input.response !== undefined ? html`<pre>${JSON.stringify(input.response, null, 2)}</pre>` : null}
                  ${
                    input.open && detail.actions.answer
                      ? html`<${AnswerForm}
                          formId=${`f-${input.key}`}
                          schema=${input.requestedSchema}
                          send=${answer(input)}
                        />`
                      : null
                  }
                </div>`,
            )}
          </section>`
        : detail.status === 'input_required' && detail.actions.follow
          ? html`<p class="notice">This task asks for input. Nobody follows it now: follow it here to see its form.</p>`
          : null
    }
    <section aria-label="Facts">
      <dl class="facts">
        ${detail.facts.map(
          ([label, value]) =>
            html`<dt>${label}</dt>
              <dd>${value}</dd>`,
        )}
        ${
          detail.traceId
            ? html`<dt>trace id</dt>
                <dd>${trace}</dd>`
            : null
        }
      </dl>
    </section>
    <section aria-label="Arguments">
      <h3>Arguments</h3>
      <pre>${JSON.stringify(detail.arguments, null, 2)}</pre>
    </section>
    <section aria-label="Timeline">
      <h3>Timeline</h3>
      <ol class="timeline">
        ${detail.timeline.map(
          (entry) =>
            html`<li>
              <time datetime=${new Date(entry.at).toISOString()} title=${`${formatAge(sourceNow - entry.at)} ago`}
                >${formatTime(entry.at)}</time
              >
              ${isStatus(entry.what) ? html`<${Badge} status=${entry.what} />` : html`<strong>${entry.what}</strong>`}
              ${entry.detail ? html`<span class="what-detail">${entry.detail}</span>` : null}
            </li>`,
        )}
      </ol>
    </section>
    ${
      detail.steps && detail.steps.length > 0
        ? html`<section aria-label="Durable steps">
            <h3>Durable steps</h3>
            <ol class="timeline">
              ${detail.steps.map(
                (step) =>
                  html`<li>
                    <time>${formatTime(step.committedAt)}</time><strong>${step.name}</strong>
                    ${step.result !== undefined ? html`<pre>${JSON.stringify(step.result, null, 2)}</pre>` : null}
                  </li>`,
              )}
            </ol>
          </section>`
        : null
    }
    ${
      detail.checkpoint !== undefined && detail.checkpoint !== null
        ? html`<section aria-label="Checkpoint">
            <h3>Checkpoint</h3>
            <pre>${JSON.stringify(detail.checkpoint, null, 2)}</pre>
          </section>`
        : null
    }
    ${
      detail.result !== undefined
        ? html`<section aria-label="Result">
            <h3>Result</h3>
            ${resultText(detail.result)}
            <details>
              <summary>as JSON</summary>
              <pre>${JSON.stringify(detail.result, null, 2)}</pre>
            </details>
          </section>`
        : null
    }
    ${
      detail.error !== undefined
        ? html`<section aria-label="Error">
            <h3>Error</h3>
            <pre>${JSON.stringify(detail.error, null, 2)}</pre>
          </section>`
        : null
    }
  </article>`;
}

function isStatus(what: string): what is ConsoleStatus {
  return /^(submitting|working|input_required|completed|failed|cancelled|expired|unknown-outcome)$/.test(what);
}

/** A CallToolResult's text content as text (the rest is in its JSON). */
function resultText(result: unknown) {
  const content = (result as { content?: unknown }).content;
  if (!Array.isArray(content)) return null;
  const texts = content
    .filter((c): c is { type: 'text'; text: string } => (c as { type?: unknown }).type === 'text')
    .map((c) => c.text);
  return texts.length > 0 ? html`<pre>${texts.join('\n')}</pre>` : null;
}

render(html`<${App} />`, document.getElementById('app')!);
