// The header holds the one inline function; SwiftPM wants a source file in a C target.
#include "CMallocArenas.h"
