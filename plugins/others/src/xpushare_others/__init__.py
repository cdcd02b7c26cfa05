"""xpushare vendor plugins for accelerators beyond the big four: Hygon, Iluvatar, MetaX, Moore
Threads.

Why one distribution with several plugins: these vendors are each small (a management library
and a few device nodes) and share helpers (configuration files, library loading, sysfs
lookups), while each still needs to activate on its own. So every vendor is its own
subpackage with its own ``xpushare.vendors`` entry point, and ``common`` holds only what more
than one of them uses.
"""
