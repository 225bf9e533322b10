from experiments.sigmorphon.driver import main

main()
