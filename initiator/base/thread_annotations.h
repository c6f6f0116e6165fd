// Clang's thread-safety annotations (-Wthread-safety), as macros that vanish under other
// compilers. They let the compiler check that state documented as protected by a mutex is only
// touched with that mutex held. Use them with iser::Mutex (base/mutex.h): std::mutex carries no
// annotations of its own in libstdc++.
#pragma once

#if defined(__clang__)
#define ISER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define ISER_THREAD_ANNOTATION(x)
#endif

#define ISER_CAPABILITY(x) ISER_THREAD_ANNOTATION(capability(x))
#define ISER_SCOPED_CAPABILITY ISER_THREAD_ANNOTATION(scoped_lockable)
#define ISER_GUARDED_BY(x) ISER_THREAD_ANNOTATION(guarded_by(x))
#define ISER_PT_GUARDED_BY(x) ISER_THREAD_ANNOTATION(pt_guarded_by(x))
#define ISER_REQUIRES(...) ISER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ISER_EXCLUDES(...) ISER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ISER_ACQUIRE(...) ISER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ISER_RELEASE(...) ISER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ISER_NO_THREAD_SAFETY_ANALYSIS ISER_THREAD_ANNOTATION(no_thread_safety_analysis)
