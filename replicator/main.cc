#include <cstdio>
#include "common/version.h"
int main() { std::printf("xdcr-agent %s\n", xdcr::version()); return 0; }
