/* Declares a 1 GiB maximum memory (linked with --max-memory=1073741824) and tries to use 200 MiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  size_t size = 200u << 20;
  char *volatile p = malloc(size); /* volatile: the compiler may not drop the allocation */
  if (p == NULL) { puts("allocation refused"); return 0; }
  memset(p, 1, size);
  puts("allocated 200 MiB");
  return p[size - 1] == 1 ? 0 : 1;
}
