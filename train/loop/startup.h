// Start-up time: from the process's start (this library's static initialization, before main)
// to the first training step done, with the phases a binary marks on the way (data, model,
// optimizer, first step), printed once with the first metrics line.
#pragma once
#include <string>

namespace ft {

/// Seconds since the process started (since this library was initialized, before main; the
/// dynamic loader's time before that is not counted).
double seconds_since_start();

/// Ends the start-up phase `name` now: its time is the time since the previous mark (or since the
/// start). Phases are kept in the order marked; marking a name again adds to it.
void mark_startup(const std::string& name);

/// Marks the last phase, `name`: the start-up is done (startup_done() from now on).
void mark_startup_done(const std::string& name);
/// Whether mark_startup_done was called: the process's start-up is over (its first step done).
bool startup_done();

/// "start-up: 3.21 s (launch to first step done: data 0.52 s, model 0.30 s, ...)": the time to
/// the last mark and the phases; empty before any mark.
std::string startup_summary();
/// startup_summary() the first time it is called after the start-up is done, "" otherwise: the
/// line is printed once per process, whichever loop prints first.
std::string take_startup_summary();

}  // namespace ft
