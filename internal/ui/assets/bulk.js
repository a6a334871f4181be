// Bulk cancel and requeue of the jobs selected in the list. Each job goes
// through the same endpoint as from its own page (POST .../cancel or
// .../requeue), so each is audited in its own timeline the same way. One
// confirmation names the count and the filter the rows were selected
// from; each job's answer is reported, refusals included.

import {isAbort} from './api.js';
import {h, replace, TERMINAL} from './dom.js';

// The actions, the jobs each applies to, and why a job is left out.
const ACTIONS = {
  cancel: {
    label: 'Cancel', verb: 'canceled', applies: (st) => !TERMINAL.has(st),
    why: (st) => `${st}: finished jobs cannot be canceled`,
    send: (ctx, id, reason) => ctx.api.post(`/api/v1/jobs/${id}/cancel`, reason ? {reason} : {}, {signal: ctx.signal}),
    done: (answer) => answer.status,
  },
  requeue: {
    label: 'Requeue', verb: 'requeued', applies: (st) => st === 'failed' || st === 'canceled',
    why: (st) => `${st}: only failed or canceled jobs can be requeued`,
    send: (ctx, id, reason) => ctx.api.post(`/api/v1/jobs/${id}/requeue`, {reason}, {signal: ctx.signal}),
    done: (answer) => answer.job.status,
  },
};

// filterText names the list's filters for the confirmation.
function filterText(filters) {
  const set = Object.entries(filters).filter(([, v]) => v);
  return set.length ? set.map(([k, v]) => `${k}=${v}`).join(', ') : 'no filter (all jobs)';
}

export function bulkActions(ctx, filters, reload) {
  const selected = new Set();
  const statusOf = new Map(); // id → status, of the rows shown
  const selectAll = h('input', {type: 'checkbox', id: 'select-all', 'data-testid': 'select-all',
    on: {change: () => toggleAll(selectAll.checked)}});
  const summary = h('span', {'data-testid': 'bulk-selected', 'aria-live': 'polite'});
  const buttons = Object.fromEntries(Object.entries(ACTIONS).map(([name, a]) =>
    [name, h('button', {type: 'button', 'data-testid': `bulk-${name}`, class: name === 'cancel' ? 'danger' : '',
      on: {click: () => confirm(name)}}, `${a.label} selected…`)]));
  const confirmBox = h('div', {'data-testid': 'bulk-confirm', class: 'bulk-confirm', hidden: true});
  const result = h('div', {'data-testid': 'bulk-result', class: 'bulk-result', role: 'status', hidden: true});
  const el = h('div', {class: 'bulk', 'data-testid': 'bulk'},
    h('div', {class: 'bulk-bar'}, summary, buttons.cancel, buttons.requeue), confirmBox, result);

  function update() {
    for (const id of selected) if (!statusOf.has(id)) selected.delete(id);
    summary.textContent = `${selected.size} selected`;
    for (const [name, a] of Object.entries(ACTIONS)) {
      const n = [...selected].filter((id) => a.applies(statusOf.get(id))).length;
      buttons[name].disabled = n === 0;
      buttons[name].textContent = `${a.label} ${n} selected…`;
    }
    selectAll.checked = statusOf.size > 0 && selected.size === statusOf.size;
  }

  function toggleAll(on) {
    for (const box of document.querySelectorAll('input[data-testid=select-job]')) {
      box.checked = on;
      if (on) selected.add(box.value); else selected.delete(box.value);
    }
    update();
  }

  function confirm(name) {
    const a = ACTIONS[name];
    const ids = [...selected];
    const go = ids.filter((id) => a.applies(statusOf.get(id)));
    const skipped = ids.filter((id) => !a.applies(statusOf.get(id)));
    const error = h('span', {class: 'field-error', id: 'bulk-reason-error', 'data-error-for': 'bulk-reason', role: 'alert', hidden: true});
    const reason = h('input', {id: 'bulk-reason', name: 'reason', autocomplete: 'off', 'aria-describedby': 'bulk-reason-error',
      on: {input: () => {
        error.hidden = true;
        reason.removeAttribute('aria-invalid');
      }}});
    const ok = h('button', {type: 'submit', 'data-testid': 'bulk-confirm-submit', class: name === 'cancel' ? 'danger' : ''},
      `${a.label} ${go.length} job${go.length === 1 ? '' : 's'}`);
    const back = h('button', {type: 'button', 'data-testid': 'bulk-back', on: {click: () => { confirmBox.hidden = true; }}}, 'Back');
    const form = h('form', {on: {submit: (ev) => { ev.preventDefault(); run(a, go, skipped, reason, error, ok); }}},
      h('fieldset', {},
        h('legend', {}, `${a.label} ${go.length} selected job${go.length === 1 ? '' : 's'}?`),
        h('p', {'data-testid': 'bulk-question'},
          `${a.label} ${go.length} of the ${ids.length} selected job${ids.length === 1 ? '' : 's'}, selected from: ${filterText(filters)}. ` +
          'Each is sent on its own, as from its page, and recorded in its timeline.'),
        skipped.length ? h('p', {class: 'muted'}, `Not sent (${skipped.length}): ${skipped.map((id) => `${id} is ${a.why(statusOf.get(id))}`).join('; ')}.`) : '',
        h('div', {class: 'field'}, h('label', {for: 'bulk-reason'}, 'Reason'), reason,
          h('small', {class: 'hint'}, name === 'requeue' ? 'Required; audited in each timeline.' : 'Optional; recorded in each timeline.'), error),
        h('div', {class: 'inline'}, ok, back)));
    replace(confirmBox, form);
    confirmBox.hidden = false;
    result.hidden = true;
    reason.focus();
  }

  // run sends the action to each job in turn. A refusal of the request
  // itself (a field error: the same for every job) stops at the first.
  async function run(a, ids, skipped, reasonInput, error, ok) {
    ok.disabled = true;
    error.hidden = true;
    const refused = [];
    let done = 0;
    for (const id of ids) {
      try {
        await a.send(ctx, id, reasonInput.value);
        done++;
      } catch (err) {
        if (isAbort(err) || err.status === 401) return;
        if (err.field && done === 0) {
          error.textContent = err.message;
          error.hidden = false;
          reasonInput.setAttribute('aria-invalid', 'true');
          ok.disabled = false;
          return;
        }
        refused.push([id, err.message]);
      }
    }
    confirmBox.hidden = true;
    replace(result,
      h('p', {'data-testid': 'bulk-summary'}, `${done} of ${ids.length} ${a.verb}` +
        (refused.length ? `; ${refused.length} refused` : '') + (skipped.length ? `; ${skipped.length} not sent` : '') + '.'),
      refused.length ? h('ul', {class: 'refusals'}, refused.map(([id, msg]) =>
        h('li', {'data-job-id': id, class: 'error-text'}, h('a', {href: `#/jobs/${id}`, class: 'mono'}, id), `: ${msg}`))) : '');
    result.hidden = false;
    selected.clear();
    for (const box of document.querySelectorAll('input[data-testid=select-job]')) box.checked = false;
    await reload();
  }

  return {
    el,
    selectAll: [selectAll, h('label', {for: 'select-all', class: 'visually-hidden'}, 'Select every job on this page')],
    // checkbox is a row's selection box.
    checkbox(j) {
      const box = h('input', {type: 'checkbox', id: `select-${j.id}`, 'data-testid': 'select-job', value: j.id,
        checked: selected.has(j.id), on: {change: () => {
          if (box.checked) selected.add(j.id); else selected.delete(j.id);
          update();
        }}});
      return [box, h('label', {for: `select-${j.id}`, class: 'visually-hidden'}, `Select job ${j.id}`)];
    },
    // shown records the rows now shown (a selection is of shown rows).
    shown(jobs) {
      statusOf.clear();
      for (const j of jobs) statusOf.set(j.id, j.status);
      update();
    },
  };
}
