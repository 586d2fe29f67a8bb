// The model: entities with their attributes, relationships, uniqueness constraints and indexes.
import { h, table, errorBox, loadModel } from './dom.js';

export function mount(root, bridge) {
  root.append(h('h2', {}, 'Model'));
  const body = h('div', { id: 'model' }, h('p.muted', {}, 'Loading…'));
  root.append(body);
  loadModel(bridge, true).then((model) => {
    body.replaceChildren(h('p.muted', {}, `version ${model.version} · ${model.entities.length} entities`));
    for (const entity of model.entities) {
      body.append(h('section.entity', { dataset: { entity: entity.name } },
        h('h3', {}, entity.name),
        table(['attribute', 'type', 'optional', 'default', 'indexed'],
          entity.attributes.map((a) => [a.name, a.type, a.optional ? 'yes' : '', a.default ?? '', a.indexed ? 'yes' : ''])),
        entity.relationships?.length ? [h('h3', {}, 'Relationships'),
          table(['relationship', 'destination', 'to-many', 'inverse', 'delete rule'],
            entity.relationships.map((r) => [r.name, r.destination, r.toMany ? 'yes' : '', r.inverse ?? '', r.deleteRule ?? 'nullify']))] : null,
        h('p', {}, h('span.pill', {}, 'unique'),
          entity.uniquenessConstraints?.length ? entity.uniquenessConstraints.map((c) => `(${c.join(', ')})`).join(' ') : 'none',
          ' ', h('span.pill', {}, 'indexes'),
          entity.indexes?.length ? entity.indexes.map((c) => `(${c.join(', ')})`).join(' ') : 'none')));
    }
  }).catch((error) => body.replaceChildren(errorBox(error, 'model-error')));
}
