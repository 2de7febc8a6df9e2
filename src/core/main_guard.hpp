// Runs a tool's body and turns exceptions into the documented exit codes with one stderr line.
#pragma once

#include <functional>

namespace ulysses {

// BadInput → "error: … — HINT: …", exit 2; anything else → "error: …", exit 1.
int run_guarded(const std::function<int()>& body);

}  // namespace ulysses
