/**
 * The layers of src/ as rules (npm run lint:layers; .ci/run runs it through
 * scripts/test.sh). Dependencies point one way: the entry points (cli, the
 * daemon's composition) → adapters (the FUSE session's JavaScript side, the
 * control socket's server and command table, metrics) → the home manager and
 * the FUSE-independent operations (fs) → pure policy, names and the backing
 * store. Type-only imports count: a type from a higher layer is a dependency
 * on it all the same.
 */
const BASE = '^src/(errors|abi|addon-raw|version|build-id|log|cleanup)[.]ts$';
const PURE = '^src/(paths|policy)/';
const ENTRY = '^src/(cli/|daemon[.]ts$|daemon/|index[.]ts$)';

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'a cycle has no lower end: one of its modules belongs to another layer',
      from: { path: '^src/' },
      to: { circular: true },
    },
    {
      name: 'base-is-a-leaf',
      severity: 'error',
      comment: "errors, the ABI and the addon's contract, the version and the logger stand below everything",
      from: { path: BASE },
      to: { path: '^src/', pathNot: BASE },
    },
    {
      name: 'pure-policy',
      severity: 'error',
      comment: 'names and policy are pure decisions: only each other and the base',
      from: { path: PURE },
      to: { path: '^src/', pathNot: [PURE, BASE] },
    },
    {
      name: 'backing-store',
      severity: 'error',
      comment: 'the backing store knows disks, names and policy; nothing that serves',
      from: { path: '^src/backing/' },
      to: { path: '^src/', pathNot: ['^src/backing/', PURE, BASE] },
    },
    {
      name: 'fs-is-fuse-independent',
      severity: 'error',
      comment: 'the operations know neither the FUSE session, the control socket nor the home manager',
      from: { path: '^src/fs/' },
      to: { path: '^src/', pathNot: ['^src/fs/', '^src/backing/', PURE, BASE] },
    },
    {
      name: 'fuse-adapter',
      severity: 'error',
      comment: 'the session adapter calls the operations; it never reaches the manager, the sockets or the composition',
      from: { path: '^src/fuse/' },
      to: { path: '^src/(homes|control|daemon|cli|takeover|resume|holder|state|users|exec)([./]|$)' },
    },
    {
      name: 'home-manager',
      severity: 'error',
      comment: 'the home manager works on the operations and the store, never on the session or its sockets',
      from: { path: '^src/homes/' },
      to: { path: '^src/(fuse|daemon|cli|takeover|resume|holder|metrics)([./]|$)|^src/control/(server|commands)[.]ts$' },
    },
    {
      name: 'control-wire',
      severity: 'error',
      comment: "the control protocol's types, framing and client are what homesctl and the platform link: no daemon inside",
      from: { path: '^src/control/(api|protocol|framing|client)[.]ts$' },
      to: { path: '^src/(fs|fuse|homes|backing|daemon|cli|takeover|resume|holder|state|metrics)([./]|$)|^src/control/(server|commands)[.]ts$' },
    },
    {
      name: 'entry-points-on-top',
      severity: 'error',
      comment: 'nothing below the entry points imports them (exit codes and signals stay up there)',
      from: { path: '^src/', pathNot: ENTRY },
      to: { path: ENTRY },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^(dist|node_modules)/' },
  },
};
