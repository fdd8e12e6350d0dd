// @fencegate/guard: fencegate's resource-side check for Node.
export * from './fence.js';
export * from './denial.js';
export * from './proof.js';
export * from './keyset.js';
export * from './guard.js';
export { sources, sourceDigests } from './sources.generated.js';
