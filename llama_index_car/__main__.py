from llama_index_car.cli import main

raise SystemExit(main())
