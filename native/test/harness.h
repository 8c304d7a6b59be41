// A tiny test harness for the native unit tests (no dependency): TEST(name)
// registers a test, CHECK(cond) and CHECK_EQ(a, b) record a failure and go
// on, and main() runs every test of the file, printing "ok - name" or
// "FAIL - name" with each failed check's file:line, and exits 1 on a failure.
#ifndef HOMESFS_TEST_HARNESS_H
#define HOMESFS_TEST_HARNESS_H
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*ht_fn)(void);
struct ht_test { const char *name; ht_fn fn; };
#define HT_MAX 64
static struct ht_test ht_tests[HT_MAX];
static int ht_count = 0;
static int ht_failed_checks = 0;

#define TEST(name)                                                        \
  static void test_##name(void);                                          \
  __attribute__((constructor)) static void ht_register_##name(void) {     \
    if (ht_count < HT_MAX) ht_tests[ht_count++] = (struct ht_test){ #name, test_##name }; \
  }                                                                       \
  static void test_##name(void)

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      ht_failed_checks++;                                                               \
      fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);       \
    }                                                                                   \
  } while (0)

#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    long long ht_a = (long long) (a), ht_b = (long long) (b);                           \
    if (ht_a != ht_b) {                                                                 \
      ht_failed_checks++;                                                               \
      fprintf(stderr, "  %s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, ht_a, ht_b); \
    }                                                                                   \
  } while (0)

// A check that stops the test (a later step would make no sense after it).
#define REQUIRE(cond)                                                                   \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      ht_failed_checks++;                                                               \
      fprintf(stderr, "  %s:%d: REQUIRE(%s) failed\n", __FILE__, __LINE__, #cond);     \
      return;                                                                           \
    }                                                                                   \
  } while (0)

int main(void) {
  int failed = 0;
  setvbuf(stdout, NULL, _IONBF, 0);
  for (int i = 0; i < ht_count; i++) {
    int before = ht_failed_checks;
    ht_tests[i].fn();
    int ok = ht_failed_checks == before;
    if (!ok) failed++;
    printf("%s - %s: %s\n", ok ? "ok" : "FAIL", __BASE_FILE__, ht_tests[i].name);
  }
  printf("# %s: %d tests, %d failed\n", __BASE_FILE__, ht_count, failed);
  return failed == 0 ? 0 : 1;
}
#endif
