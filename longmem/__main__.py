from longmem.cli import main

raise SystemExit(main())
