/* The C ABI from C: compiles a spec for sm_80 (no GPU needed) and prints its kernel report. */
#include <attnjit/attnjit.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  const char* spec = argc > 1 ? argv[1] : "dtype=fp16 head_dim=128 mask=none target=sm_80";
  attnjit_kernel* kernel = NULL;
  if (attnjit_compile(spec, &kernel) != ATTNJIT_OK) {
    fprintf(stderr, "attnjit_c_consumer: %s\n", attnjit_last_error());
    return 1;
  }
  int size = attnjit_kernel_info(kernel, NULL, 0);
  char* text = size > ATTNJIT_INTERNAL_ERROR ? malloc((size_t)size) : NULL;
  int status = text != NULL ? attnjit_kernel_info(kernel, text, (size_t)size) : ATTNJIT_INTERNAL_ERROR;
  if (status == ATTNJIT_OK) printf("attnjit %s: %s\n", attnjit_version(), text);
  free(text);
  attnjit_release(kernel);
  return status == ATTNJIT_OK ? 0 : 1;
}
