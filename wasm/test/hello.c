/* A small WASI command for the `--backend wasm` tests: prints its arguments, one variable of its
 * environment and a file of the virtual filesystem, and copies stdin to stdout. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  for (int i = 0; i < argc; i++) printf("arg%d=%s\n", i, argv[i]);
  const char *greeting = getenv("GREETING");
  printf("GREETING=%s\n", greeting ? greeting : "(unset)");
  FILE *file = fopen("/data/in.txt", "r");
  if (file) {
    char line[256];
    while (fgets(line, sizeof line, file)) printf("file: %s", line);
    fclose(file);
  }
  FILE *out = fopen("/data/out.txt", "w");
  if (out) { fputs("written by hello.wasm\n", out); fclose(out); }
  int c;
  while ((c = getchar()) != EOF) putchar(c);
  return argc > 1 && argv[1][0] == 'x' ? 3 : 0;
}
