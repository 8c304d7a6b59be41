import { defineConfig } from 'vitest/config';

// Integration tests mount real filesystems and spawn daemons: run files one at a
// time so two suites never fight over /dev/fuse, mount points or the 2-core box.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
